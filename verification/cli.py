"""Command line: ``python -m verification fuzz|fuzz-op|certify ...``.

Exit status 0 means nothing was found, 1 that a property was violated (a reproducer is
printed), 2 a usage error, printed as one ``error: ...`` line on stderr. ``certify`` runs
every check of :data:`verification.checks.CHECKS` under a profile and writes
``certificate.json`` and ``certificate.md``, saying loudly when the simulator stood in for
a GPU; exit 1 means a target bug was found.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from verification import certify as certify_
from verification import check_command, fuzz_op, sensitivity
from verification.checks import CertifyRun
from verification.cli_support import campaign_config, print_findings, writable_dir
from verification.contracts import CONTRACTS, get_contract
from verification.devices import DEVICE_CHOICES, UsageError, resolve_device
from verification.fuzz import CampaignResult, run_campaign, run_isolated
from verification.mutation import command as mutate_command
from verification.mutation.check import mutation_check
from verification.progress import progress_bar
from verification.targets import DEFAULT_TARGET, load_target
from verification.targets.upstream import add_target_path, use_target_path

EXIT_OK, EXIT_FOUND, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
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
    """Options of both commands; ``defaults=False`` leaves budgets to certify's profile."""
    parser.add_argument("--target", default=DEFAULT_TARGET, help="importable module under test")
    add_target_path(parser)
    parser.add_argument("--device", default="auto", choices=DEVICE_CHOICES)
    parser.add_argument(
        "--contract",
        help=f"break contract to judge by ({', '.join(CONTRACTS)}); default: the target's own",
    )
    parser.add_argument("--examples", type=_count(1), default=100 if defaults else None)
    parser.add_argument("--seed", type=_count(0), default=0)
    parser.add_argument("--max-ops", type=_count(1), default=8 if defaults else None)
    parser.add_argument("--max-breaks", type=_count(0), default=3 if defaults else None)
    parser.add_argument("--replays", type=_count(3), default=3 if defaults else None)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m verification", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    fuzz = commands.add_parser("fuzz", help="differential fuzzing of a target")
    _common(fuzz, defaults=True)
    fuzz.add_argument("--report", type=Path, help="directory for reproducer scripts")
    fuzz.add_argument(
        "--isolate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run in a child process so that a crash becomes a finding (default: on for cuda)",
    )
    fuzz.add_argument("--program-file", type=Path, help=argparse.SUPPRESS)
    fuzz_op.add_parser(commands, _common)
    certify = commands.add_parser("certify", help="run every check and write a certificate")
    _common(certify, defaults=False)
    certify.add_argument("--out", type=Path, default=Path("certificate"))
    certify.add_argument(
        "--profile", choices=tuple(certify_.PROFILES), default=certify_.DEFAULT_PROFILE
    )
    certify.add_argument(
        "--ops", action="append", default=[], metavar="MODULE:SPEC", help="ops to certify"
    )
    certify.add_argument(
        "--sensitivity",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="re-run the planted-bug targets of tests/ and record how many were found",
    )
    certify.add_argument("--mutants", type=_count(1), help="add the harness's mutation score")
    mutate_command.add_parser(commands, _count)
    check_command.add_parser(commands, _count)
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
    result = run_campaign(config)
    _print_result(result)
    return EXIT_FOUND if result.findings else EXIT_OK


def _certify(args: argparse.Namespace) -> int:
    kind = resolve_device(args.device)
    if args.contract is not None:
        get_contract(args.contract)
    profile = certify_.PROFILES[args.profile]
    for name in ("examples", "max_ops", "max_breaks", "replays"):
        if getattr(args, name) is None:
            setattr(args, name, getattr(profile, name))
    target = load_target(args.target, args.contract)
    ops = certify_.load_ops(args.ops)
    writable_dir(args.out, "--out")
    config = campaign_config(args, args.out / "reproducers")
    config.ops = ops
    with progress_bar() as (start_check, advance):
        run = CertifyRun(config, target, kind, ops, advance, op_specs=tuple(args.ops))
        results = certify_.run_checks(run, start_check)
        found = None
        if args.sensitivity:
            start_check("sensitivity", len(sensitivity.planted_targets() or []))
            found = sensitivity.measure(kind, args.seed, advance)
        if args.mutants:
            start_check("mutation", args.mutants)
            results.append(mutation_check(run, args.mutants))
    for result in results:
        for finding, text in zip(result.findings, result.reproducers):
            print(f"FINDING {result.name} {finding.summary()}")
            print("---- reproducer ----")
            print(text)
            print("--------------------")
    cert = certify_.certificate(run, results, args.profile, found)
    certify_.write_certificate(cert, args.out)
    if cert["simulated"]:
        print("WARNING: certified on the CUDA SIMULATOR, not a real GPU; rerun with --device cuda")
    verdict = "PASS" if cert["passed"] else "FAIL"
    contract = target.contract.name
    print(f"certify: {verdict} under contract {contract}, certificate written to {args.out}")
    return EXIT_OK if cert["passed"] else EXIT_FOUND


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        use_target_path(args)
        if args.command == "fuzz":
            return _fuzz(args, argv)
        if args.command == "mutate":
            writable_dir(args.report, "--report")
            return mutate_command.run(args, argv)

        if args.command == "fuzz-op":
            return fuzz_op.run(args, argv)

        if args.command == "check":
            return check_command.main(args, argv)
        return _certify(args)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
