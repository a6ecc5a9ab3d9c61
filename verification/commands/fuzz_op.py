"""``python -m verification fuzz-op MODULE:SPEC ...``: fuzz a user's break op in captured programs.

It checks each op against its declared contract (:mod:`verification.userops.contract`), then
runs a campaign whose every program calls the ops 1 to 3 times (:mod:`verification.userops`),
and reports how often each op ran at each break position. Exit 0: clean; 1: a contract
violation or a finding (with a reproducer that imports the user's module); 2: bad input.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from verification.commands.options import add_common, campaign_config, print_findings, writable_dir
from verification.devices import resolve_device
from verification.errors import EXIT_FOUND, EXIT_OK
from verification.fuzz import run_campaign, run_isolated
from verification.targets import load_target
from verification.userops.campaign import (
    DEFAULT_MAX_BREAKS,
    DEFAULT_MAX_OPS,
    contract_violations,
    load_user_ops,
    op_campaign,
)


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "fuzz-op",
        help="fuzz a break op of yours inside random captured programs",
        description=__doc__,
    )
    parser.add_argument("specs", nargs="+", metavar="MODULE:SPEC", help="a BreakOpSpec")
    add_common(parser, True)
    parser.set_defaults(max_ops=DEFAULT_MAX_OPS, max_breaks=DEFAULT_MAX_BREAKS)
    parser.add_argument("--report", type=Path, help="directory for reproducer scripts")
    parser.add_argument(
        "--contract-examples",
        type=int,
        default=5,
        help="drawn calls per contract check (0 skips the checks)",
    )
    parser.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--program-file", type=Path, help=argparse.SUPPRESS)


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    kind = resolve_device(args.device)
    target = load_target(args.target, args.contract)
    users = load_user_ops(args.specs)
    writable_dir(args.report, "--report")
    base = campaign_config(args, target, args.report)
    config, coverage = op_campaign(base, args.specs, users, target, kind)
    isolate = args.isolate if args.isolate is not None else kind == "cuda"
    if isolate:
        status, crashed = run_isolated(list(argv), config)
        if crashed is not None:
            print_findings(crashed)
        return status
    violations = contract_violations(users, target, kind, args.contract_examples, args.seed)
    for ref, found in violations.items():
        print(f"contract of {ref}: {'BROKEN' if found else 'kept'} ({len(found)} violations)")
        for violation in found:
            print(f"  CONTRACT {violation.violation}: {violation.message}")
    result = run_campaign(config)
    print_findings(result)
    for line in coverage.lines():
        print(line)
    broken = sum(len(v) for v in violations.values())
    print(f"{result.summary_line().replace('fuzz:', 'fuzz-op:', 1)}, {broken} contract violations")
    return EXIT_FOUND if broken or result.findings else EXIT_OK
