"""Command line: ``python -m verification fuzz|fuzz-op|check|certify|mutate ...``: the parser
and the dispatch; each command lives in :mod:`verification.commands`.

Exit status 0 means nothing was found, 1 that a property was violated (a reproducer is
printed), 2 a usage error, printed as one ``error: ...`` line on stderr
(:mod:`verification.errors`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from verification.commands import certify, check, fuzz, fuzz_op, mutate
from verification.errors import EXIT_USAGE, UsageError

# Subcommand -> (adds its parser, runs it on the parsed arguments and the argv).
COMMANDS: dict[str, tuple[Callable, Callable[[argparse.Namespace, Sequence[str]], int]]] = {
    "fuzz": (fuzz.add_parser, fuzz.run),
    "fuzz-op": (fuzz_op.add_parser, fuzz_op.run),
    "certify": (certify.add_parser, certify.run),
    "mutate": (mutate.add_parser, mutate.run),
    "check": (check.add_parser, check.run),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m verification", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add_parser, _ in COMMANDS.values():
        add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command][1](args, argv)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
