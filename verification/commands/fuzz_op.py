"""``python -m verification fuzz-op MODULE:SPEC ...``: fuzz a user's break op in captured programs.

Its first line names the target the ops run under and the contract it is judged by. It
checks each op against its declared contract (:mod:`verification.userops.contract`), one
``FINDING`` line per broken part, then
runs a campaign whose every program calls the ops 1 to 3 times (:mod:`verification.userops`),
and reports how often each op ran at each break position. Every finding, a contract
violation too, comes with a reproducer whose header is the ``fuzz-op`` command that finds it
again; a fault of the op is an ``op-bug``, never the target's. Exit 0: clean; 1: a contract
violation or a finding; 2: bad input (a malformed spec is one line).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from verification.commands.options import (
    Run,
    add_common,
    add_report,
    campaign_config,
    print_findings,
    resolve_run,
    writable_dir,
)
from verification.commands.progress import progress_bar
from verification.errors import EXIT_FOUND, EXIT_HARNESS, EXIT_OK, UsageError
from verification.findings import HARNESS_ERROR
from verification.fuzz import run_campaign, run_isolated
from verification.report import write_reproducer
from verification.userops.campaign import (
    CONTRACT_EXAMPLES,
    DEFAULT_MAX_BREAKS,
    DEFAULT_MAX_OPS,
    contract_violations,
    load_user_ops,
    op_campaign,
    render_contract_reproducer,
    settle_findings,
)


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "fuzz-op",
        help="fuzz a break op of yours: its declared contract, then captured programs calling it",
        description=__doc__,
    )
    parser.add_argument(
        "specs", nargs="+", metavar="MODULE:SPEC", help="a BreakOpSpec: module and its name in it"
    )
    add_common(parser, True)
    parser.set_defaults(max_ops=DEFAULT_MAX_OPS, max_breaks=DEFAULT_MAX_BREAKS)
    add_report(parser)
    parser.add_argument(
        "--contract-examples",
        type=int,
        default=CONTRACT_EXAMPLES,
        help="drawn calls per contract check (at least 1)",
    )
    parser.add_argument(
        "--isolate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run in a child process so that a crash becomes a finding (default: on for cuda)",
    )
    parser.add_argument("--program-file", type=Path, help=argparse.SUPPRESS)


def header(specs: Sequence[str], run: Run) -> str:
    """What a run judges: the ops, the target they run under and its contract."""
    contract = run.target.contract
    return (
        f"fuzz-op {' '.join(specs)} under target {run.target.name}, judged by contract "
        f"{contract.name!r}: {contract.summary}; device {run.kind}"
    )


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    if args.contract_examples < 1:
        raise UsageError(
            f"--contract-examples {args.contract_examples}: need at least 1; the contract "
            f"checks cannot be skipped"
        )
    run = resolve_run(args)
    target, kind = run.target, run.kind
    users = load_user_ops(args.specs)
    writable_dir(args.report, "--report")
    base = campaign_config(args, run, args.report)
    config, coverage = op_campaign(
        base, args.specs, users, contract_examples=args.contract_examples
    )
    isolate = args.isolate if args.isolate is not None else kind == "cuda"
    if isolate:
        status, crashed = run_isolated(list(argv), config)
        if crashed is not None:
            print_findings(crashed)
        return status
    print(header(args.specs, run))
    violations = contract_violations(users, target, kind, args.contract_examples, args.seed)
    # One line per violation, the FINDING line, then its reproducer: each checks its part again.
    written: list[Path] = []
    command = config.command()
    for ref, found in violations.items():
        print(f"contract of {ref}: {'BROKEN' if found else 'kept'} ({len(found)} violations)")
        for violation in found:
            text = render_contract_reproducer(ref, violation, kind, command, target)
            print(f"FINDING [{violation.kind}] contract {violation.violation}: {violation.message}")
            print("---- reproducer ----")
            print(text)
            print("--------------------")
            if args.report is not None:
                name = f"contract_{len(written)}_{violation.violation.replace(' ', '_')}"
                written.append(write_reproducer(args.report, name, text))
    with progress_bar(quiet=args.quiet) as (start, advance):
        start("fuzz-op", config.examples)
        result = run_campaign(config, progress=advance)
    settle_findings(result, config, users)
    print_findings(result)
    for path in written:
        print(f"reproducer written to {path}")
    for line in coverage.lines():
        print(line)
    broken = sum(len(v) for v in violations.values())
    total = broken + len(result.findings)
    summary = result.summary_line().replace("fuzz:", "fuzz-op:", 1)
    summary = summary.replace(f" {len(result.findings)} findings,", f" {total} findings,", 1)
    print(f"{summary}, {broken} of them contract violations")
    if any(f.kind == HARNESS_ERROR for f in result.findings):
        return EXIT_HARNESS
    return EXIT_FOUND if total else EXIT_OK
