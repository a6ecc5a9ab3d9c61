"""``python -m verification check PROPERTY|all ...``: runs property checks against a target.

Exit status as ``fuzz``: 0 when no finding fails the target (``memory-held`` and
``known-unsafe`` findings are printed but do not fail), 1 when one does (its reproducer is
printed and, with ``--report DIR``, written), 2 for a usage error, 3 when the harness itself
failed (a ``harness-error`` finding). Findings of one cause (:attr:`Finding.cause`) are
printed once, naming the other checks that reached it. Each property runs in a
child process of its own (``--isolate``: always on ``cuda``, on the simulator, as a fork,
whenever more than one is run), so no check sees another's leftovers and a check that aborts
the process becomes a ``crash`` finding naming the signal; in one process (``--no-isolate``)
the checks after one that left the target unusable are skipped. ``check ranks`` runs the
two-rank checks of :mod:`verification.ranks` (``--ranks N``, default 2) in rank processes.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from verification.commands.options import (
    add_device,
    add_hang_bound,
    add_quiet,
    add_ranks,
    add_report,
    at_least,
    positive_seconds,
    print_finding,
    resolve_run,
    run_on_ranks,
    writable_dir,
)
from verification.commands.progress import progress_bar
from verification.findings import exit_status, root_causes
from verification.properties import PROPERTIES
from verification.properties.base import Resume
from verification.properties.processes import (
    DEFAULT_CYCLES,
    forked_jobs,
    go_on,
    names,
    run_forked,
    run_in_child,
    run_properties,
    to_json,
)
from verification.properties.reproduce import render, write
from verification.targets import DEFAULT_TARGET
from verification.targets.contracts import CONTRACTS
from verification.targets.upstream import add_target_path

# Ranks that agree on every break, capture set size and capture (:mod:`verification.ranks`):
# a check of its own, in rank processes, so not one of ``all``.
RANKS = "ranks"


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Registers ``check`` on the CLI's subparsers."""
    listing = "\n".join(f"  {name:13} {prop.contract}" for name, prop in PROPERTIES.items())
    check = commands.add_parser(
        "check",
        help="property checks replay equality cannot see (" + ", ".join(PROPERTIES) + ")",
        description=f"Run property checks against a target.\n\nproperties:\n{listing}",
    )
    check.add_argument(
        "property",
        choices=(*PROPERTIES, "all", RANKS),
        metavar="PROPERTY",
        help=f"one of {', '.join(PROPERTIES)}, or all; or {RANKS} (several processes, not "
        "part of all)",
    )
    check.add_argument(
        "--target", default=DEFAULT_TARGET, metavar="MODULE", help="importable module under test"
    )
    add_target_path(check)
    check.add_argument(
        "--contract",
        help=f"break contract ({', '.join(CONTRACTS)}); default: the one the target declares",
    )
    add_device(check)
    add_hang_bound(check)
    check.add_argument(
        "--examples", type=at_least(1), default=25, help="hypothesis examples per property"
    )
    check.add_argument(
        "--seed", type=at_least(0), default=0, help="hypothesis seed: the same seed, the same draws"
    )
    check.add_argument(
        "--cycles",
        type=at_least(4),
        default=DEFAULT_CYCLES,
        help="capture-replay-reset cycles of the repetition property (10000: thorough)",
    )
    check.add_argument(
        "--budget",
        type=positive_seconds,
        metavar="SECONDS",
        help="wall-clock seconds for each property, counted from its start; the examples are "
        "then a cap (default: none)",
    )
    add_report(check)
    check.add_argument(
        "--isolate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="each property in a child process, so that a crash becomes a finding "
        "(default: on for cuda)",
    )
    add_quiet(check)
    add_ranks(check, default=2)
    check.add_argument("--result-file", type=Path, help=argparse.SUPPRESS)
    # Where a child takes up a check that an earlier child stopped (JSON of Resume).
    check.add_argument("--resume", help=argparse.SUPPRESS)


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    if args.property == RANKS:
        return run_on_ranks(args, list(argv), RANKS)
    run = resolve_run(args, budget_s=args.budget)
    target, kind = run.target, run.kind
    writable_dir(args.report, "--report")
    chosen = names(args.property)
    resume = Resume.from_json(json.loads(args.resume)) if args.resume else None
    # Each check in a process of its own, on both devices, when more than one is run: none
    # sees another's leftovers. One at a time on a GPU, whose memory figures a neighbour moves.
    isolate = args.isolate if args.isolate is not None else kind == "cuda" or len(chosen) > 1
    if isolate and kind == "cuda":
        results = [run_in_child(name, argv) for name in chosen]
    elif isolate:
        jobs = forked_jobs(len(chosen))
        results = run_forked(
            chosen, target, kind, args.examples, args.seed, args.cycles, jobs,
            seconds=run.budget_s,
        )  # fmt: skip
    else:
        results = []
        with progress_bar(quiet=args.quiet) as (start, advance):
            for name in names(args.property):
                start(name, args.examples)
                done = run_properties(
                    name, target, kind, args.examples, args.seed, args.cycles, resume,
                    seconds=run.budget_s,
                )  # fmt: skip
                if args.result_file is None:
                    # A finding left the target unusable here: fresh processes go on.
                    done = [go_on(result, argv) for result in done]
                results += done
                advance(results[-1].examples)
    findings = [f for r in results for f in r.findings]
    if args.result_file is not None:
        args.result_file.write_text(json.dumps(to_json(results)))
        return exit_status(findings)
    command = " ".join(["python -m verification", *argv])
    # Each bug once: a failing finding whose cause an earlier check already reached is named
    # under that first finding ("also seen through"), not printed again.
    causes = {id(c.finding): c for c in root_causes(f for f in findings if f.fails)}
    number = 0
    for result in results:
        for finding in result.findings:
            if finding.fails and id(finding) not in causes:
                continue
            text = render(finding, target, kind, command) if finding.fails else None
            also = causes[id(finding)].also_line() if finding.fails else None
            print_finding(finding.summary() + (f" ({also})" if also else ""), text)
            if text is not None:
                if args.report is not None:
                    print(f"reproducer written to {write(args.report, number, finding, text)}")
                    number += 1
        if result.not_applicable is not None:
            print(f"check {result.prop}: not applicable, {result.not_applicable}")
            continue
        if result.skipped is not None:
            print(f"check {result.prop}: skipped: {result.skipped}")
            continue
        verdict = "FAIL" if result.failed else "pass"
        print(
            f"check {result.prop}: {verdict}, {result.examples} examples, {result.elapsed_s:.1f} s"
        )
    failed = [r.prop for r in results if r.failed]
    checked = [r for r in results if r.not_applicable is None and r.skipped is None]
    skipped = [r.prop for r in results if r.skipped is not None]
    print(
        f"check: {len(checked) - len(failed)} of {len(checked)} properties hold"
        + (f" ({len(causes)} root cause{'' if len(causes) == 1 else 's'})" if causes else "")
        + f", device={kind}, target={target.name}"
        + (f"; failed: {', '.join(failed)}" if failed else "")
        + (
            f"; not applicable: {len(results) - len(checked) - len(skipped)}"
            if len(checked) + len(skipped) < len(results)
            else ""
        )
        + (f"; skipped: {', '.join(skipped)}" if skipped else "")
    )
    return exit_status(findings)
