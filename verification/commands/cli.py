"""Command line: ``python -m verification fuzz|check|fuzz-op|certify|mutate|bisect ...``: the parser
and the dispatch; each command is a module beside this one.

Exit status 0 means nothing was found, 1 a bug of the target or of an op (a reproducer is
printed), 2 a usage error, printed as one ``error: ...`` line on stderr
(:mod:`verification.errors`), 3 that the harness itself failed (a ``harness-error`` finding,
or an exception of its own, printed with its traceback), and 130 an interrupt (one line;
whatever output directory the command created is removed).
"""

from __future__ import annotations

import argparse
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from verification import bounds
from verification.commands import bisect, certify, check, fuzz, fuzz_op, mutate
from verification.commands.options import forget_new_outputs, remove_new_outputs
from verification.devices import hide_gpu
from verification.errors import (
    EXIT_HARNESS,
    EXIT_HELP,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    UsageError,
    catch_ctrl_c,
    hide_expected_warnings,
)
from verification.targets.upstream import use_target_path

# Subcommand -> (adds its parser, runs it on the parsed arguments and the argv).
COMMANDS: dict[str, tuple[Callable, Callable[[argparse.Namespace, Sequence[str]], int]]] = {
    "fuzz": (fuzz.add_parser, fuzz.run),
    "check": (check.add_parser, check.run),
    "fuzz-op": (fuzz_op.add_parser, fuzz_op.run),
    "certify": (certify.add_parser, certify.run),
    "mutate": (mutate.add_parser, mutate.run),
    "bisect": (bisect.add_parser, bisect.run),
}


DESCRIPTION = f"""\
Check a breakable CUDA graph library against PyTorch's eager execution; each command's
--help says more.

{EXIT_HELP}
"""
# The hidden options that mark a process run by an isolated parent (fuzz, fuzz-op, check).
_CHILD_FLAGS = {"--program-file", "--result-file"}


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the descriptions' line breaks and shows every option's default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default is None
            or default is False
            or default is argparse.SUPPRESS
            or not action.option_strings
        ):
            return text
        return f"{text} (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m verification", description=DESCRIPTION)
    commands = parser.add_subparsers(
        title="commands", dest="command", required=True, parser_class=_Parser, metavar="COMMAND"
    )
    for add_parser, _ in COMMANDS.values():
        add_parser(commands)
    for command in commands.choices.values():
        command.epilog = EXIT_HELP
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from_command_line = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if _CHILD_FLAGS & set(argv):
        # A child of an isolated run: Ctrl-C is its parent's to report (it ends this child),
        # so that the user sees one line, not one per process.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    forget_new_outputs()
    try:
        args = build_parser().parse_args(argv)
        if from_command_line:  # this process is the command's own
            catch_ctrl_c()
            hide_expected_warnings()
            if getattr(args, "device_choice", None) == "sim":
                hide_gpu()  # a simulator run never touches a real GPU
        use_target_path(args)
        # The bound on each call into the target, for the whole command (its children are
        # given it on their command lines).
        with bounds.limit(getattr(args, "hang_seconds", bounds.current())):
            return COMMANDS[args.command][1](args, argv)
    except UsageError as error:
        remove_new_outputs()
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        # Ctrl-C: one line, no partial certificate or report, the shell's status for SIGINT.
        remove_new_outputs()
        print("interrupted: nothing written", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception:
        # The harness broke, not the target: its traceback, and the status that says so.
        traceback.print_exc()
        print("error: the harness itself failed (traceback above)", file=sys.stderr)
        return EXIT_HARNESS
