"""Command line: ``python -m verification fuzz|check|fuzz-op|certify|mutate ...``.

Exit status 0 means nothing was found, 1 that a property was violated (a reproducer is
printed), 2 a usage error, printed as one ``error: ...`` line on stderr, and 130 an interrupt
(one line; whatever output directory the command created is removed). ``certify`` writes
``certificate.json`` and ``certificate.md``, saying loudly when the simulator stood in.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from verification import certify as certify_
from verification import check_command, fuzz_op, sensitivity
from verification.checks import CertifyRun
from verification.cli_support import (
    campaign_config,
    print_findings,
    remove_new_outputs,
    writable_dir,
)
from verification.contracts import CONTRACTS, get_contract
from verification.devices import DEVICE_CHOICES, UsageError, resolve_device
from verification.fuzz import CampaignResult, run_campaign, run_isolated
from verification.mutation import command as mutate_command
from verification.mutation.check import mutation_check
from verification.mutation.engine import require_cosmic_ray
from verification.progress import progress_bar
from verification.targets import DEFAULT_TARGET, load_target

EXIT_OK, EXIT_FOUND, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
# The hidden options that mark a process run by an isolated parent (fuzz, fuzz-op, check).
_CHILD_FLAGS = {"--program-file", "--result-file"}


DESCRIPTION = """\
Check a breakable CUDA graph library against PyTorch's eager execution; each command's
--help says more.

exit status: 0 nothing found, 1 a property was violated (a reproducer is printed),
2 bad input (one "error:" line on stderr), 130 interrupted (Ctrl-C).
"""


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


def _count(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def _common(parser: argparse.ArgumentParser, defaults: bool) -> None:
    """Options of every campaign command; ``defaults=False`` leaves budgets to certify's profile."""
    from_profile = "default: the profile's"
    parser.add_argument(
        "--target", default=DEFAULT_TARGET, metavar="MODULE", help="importable module under test"
    )
    parser.add_argument(
        "--device",
        default="auto",
        choices=DEVICE_CHOICES,
        help="auto: the GPU if torch sees one, else the CUDA simulator",
    )
    parser.add_argument(
        "--contract",
        help=f"break contract to judge by ({', '.join(CONTRACTS)}); "
        "default: the one the target declares, else out-buffer",
    )
    parser.add_argument(
        "--examples",
        type=_count(1),
        default=100 if defaults else None,
        help="random programs to draw" + ("" if defaults else f" ({from_profile})"),
    )
    parser.add_argument(
        "--seed",
        type=_count(0),
        default=0,
        help="hypothesis seed: the same seed draws the same programs",
    )
    parser.add_argument(
        "--max-ops",
        type=_count(1),
        default=8 if defaults else None,
        help="most ops in one program" + ("" if defaults else f" ({from_profile})"),
    )
    parser.add_argument(
        "--max-breaks",
        type=_count(0),
        default=3 if defaults else None,
        help="most eager breaks in one program" + ("" if defaults else f" ({from_profile})"),
    )
    parser.add_argument(
        "--replays",
        type=_count(3),
        default=3 if defaults else None,
        help="replays of each captured graph compared with eager (at least 3)"
        + ("" if defaults else f" ({from_profile})"),
    )
    _quiet(parser)


def _quiet(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress bar (it is drawn only on a terminal anyway)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m verification", description=DESCRIPTION)
    commands = parser.add_subparsers(
        title="commands", dest="command", required=True, parser_class=_Parser, metavar="COMMAND"
    )
    fuzz = commands.add_parser(
        "fuzz", help="random captured programs, replay compared with eager (differential fuzzing)"
    )
    _common(fuzz, defaults=True)
    fuzz.add_argument(
        "--report", type=Path, metavar="DIR", help="write reproducer scripts there (default: none)"
    )
    fuzz.add_argument(
        "--isolate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run in a child process so that a crash becomes a finding (default: on for cuda)",
    )
    fuzz.add_argument("--program-file", type=Path, help=argparse.SUPPRESS)
    check_command.add_parser(commands, _count)
    fuzz_op.add_parser(commands, _common)
    profiles = "\n".join(
        f"  {name:9} {p.meaning} ({p.examples} examples, up to {p.max_ops} ops and "
        f"{p.max_breaks} breaks)"
        for name, p in certify_.PROFILES.items()
    )
    certify = commands.add_parser(
        "certify",
        help="every check under a profile; writes certificate.md and certificate.json",
        description=f"Run every check under a profile and write a certificate.\n\nprofiles:\n"
        f"{profiles}\nAn option given with a profile overrides it; the certificate says so.",
    )
    _common(certify, defaults=False)
    certify.add_argument(
        "--out",
        type=Path,
        default=Path("certificate"),
        metavar="DIR",
        help="where certificate.md, certificate.json and reproducers go",
    )
    certify.add_argument(
        "--profile",
        choices=tuple(certify_.PROFILES),
        default=certify_.DEFAULT_PROFILE,
        help="budgets: " + ", ".join(f"{n} ({p.meaning})" for n, p in certify_.PROFILES.items()),
    )
    certify.add_argument(
        "--ops",
        action="append",
        default=[],
        metavar="MODULE:SPEC",
        help="also fuzz this break op of yours (repeatable; default: none)",
    )
    certify.add_argument(
        "--sensitivity",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="re-run every planted-bug target of tests/ and record how many the checks find",
    )
    certify.add_argument(
        "--mutants",
        type=_count(1),
        metavar="N",
        help="add the harness's mutation score on N mutants (needs cosmic-ray; default: none)",
    )
    mutate_command.add_parser(commands, _count)
    return parser


def _print_result(result: CampaignResult) -> None:
    print_findings(result)
    print(result.summary_line())


def _fuzz(args: argparse.Namespace, argv: Sequence[str]) -> int:
    kind = resolve_device(args.device)
    if args.contract is not None:
        get_contract(args.contract)
    load_target(args.target, args.contract)
    writable_dir(args.report, "--report")
    config = campaign_config(args, args.report)
    isolate = args.isolate if args.isolate is not None else kind == "cuda"
    if isolate:
        status, crashed = run_isolated(list(argv), config)
        if crashed is not None:
            _print_result(crashed)
        return status
    with progress_bar(quiet=args.quiet) as (start, advance):
        start("fuzz", config.examples)
        result = run_campaign(config, progress=advance)
    _print_result(result)
    return EXIT_FOUND if result.findings else EXIT_OK


def _certify(args: argparse.Namespace, argv: Sequence[str]) -> int:
    began = time.perf_counter()
    kind = resolve_device(args.device)
    if args.contract is not None:
        get_contract(args.contract)
    profile = certify_.PROFILES[args.profile]
    overrides = {}
    for name in ("examples", "max_ops", "max_breaks", "replays"):
        if getattr(args, name) is None:
            setattr(args, name, getattr(profile, name))
        elif getattr(args, name) != getattr(profile, name):
            overrides[name] = getattr(args, name)
    target = load_target(args.target, args.contract)
    ops = certify_.load_ops(args.ops)
    if args.mutants:
        require_cosmic_ray()  # before the campaign, not after it
    writable_dir(args.out, "--out")
    config = campaign_config(args, args.out / "reproducers")
    config.ops = ops
    with warnings.catch_warnings(), progress_bar(quiet=args.quiet) as (start_check, advance):
        # hypothesis warns when it renders a long program's repr; the certificate has them all.
        warnings.filterwarnings("ignore", message="Generating overly large repr")
        run = CertifyRun(config, target, kind, ops, advance, op_specs=tuple(args.ops))
        results = certify_.run_checks(run, start_check)
        found = None
        if args.sensitivity:
            start_check("sensitivity", len(sensitivity.planted_targets() or []), "targets")
            found = sensitivity.measure(kind, args.seed, advance)
        if args.mutants:
            start_check("mutation", args.mutants, "mutants")
            results.append(mutation_check(run, args.mutants))
    for result in results:
        for finding, text in zip(result.findings, result.reproducers):
            print(f"FINDING {result.name} {finding.summary()}")
            print("---- reproducer ----")
            print(text)
            print("--------------------")
    cert = certify_.certificate(
        run,
        results,
        args.profile,
        found,
        overrides=overrides,
        command=shlex.join(["python", "-m", "verification", *argv]),
        seconds=time.perf_counter() - began,
        sensitivity_skipped=None if args.sensitivity else "--no-sensitivity was given",
    )
    certify_.write_certificate(cert, args.out)
    if cert["simulated"]:
        print("WARNING: certified on the CUDA SIMULATOR, not a real GPU; rerun with --device cuda")
    verdict = "PASS" if cert["passed"] else "FAIL"
    contract = target.contract.name
    print(f"certify: {verdict} under contract {contract}, certificate written to {args.out}")
    return EXIT_OK if cert["passed"] else EXIT_FOUND


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if _CHILD_FLAGS & set(argv):
        # A child of an isolated run: Ctrl-C is its parent's to report (it ends this child),
        # so that the user sees one line, not one per process.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        args = build_parser().parse_args(argv)
        if args.command == "fuzz":
            return _fuzz(args, argv)
        if args.command == "mutate":
            writable_dir(args.report, "--report")
            return mutate_command.run(args, argv)

        if args.command == "fuzz-op":
            return fuzz_op.run(args, argv)

        if args.command == "check":
            return check_command.main(args, argv)
        return _certify(args, argv)
    except UsageError as error:
        remove_new_outputs()
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        # Ctrl-C: one line, no partial certificate or report, the shell's status for SIGINT.
        remove_new_outputs()
        print("interrupted: nothing written", file=sys.stderr)
        return EXIT_INTERRUPTED
