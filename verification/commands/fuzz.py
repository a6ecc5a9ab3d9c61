"""``python -m verification fuzz``: differential fuzzing of a target, replay against eager.

Exit 0: nothing found; 1: a finding, printed with its reproducer (and written under
``--report DIR``); 2: bad input. On ``cuda`` the campaign runs in a child process
(``--isolate``), so a crash of the target becomes a finding naming the signal. With
``--ranks N`` each program runs on N rank processes (:mod:`verification.ranks`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from verification.commands.options import (
    add_common,
    add_ranks,
    add_report,
    campaign_config,
    print_findings,
    resolve_run,
    run_on_ranks,
    writable_dir,
)
from verification.commands.progress import progress_bar
from verification.errors import EXIT_FOUND, EXIT_HARNESS, EXIT_OK
from verification.findings import HARNESS_ERROR
from verification.fuzz import run_campaign, run_isolated


def add_parser(commands: argparse._SubParsersAction) -> None:
    fuzz = commands.add_parser(
        "fuzz", help="random captured programs, replay compared with eager (differential fuzzing)"
    )
    add_common(fuzz, defaults=True)
    add_report(fuzz)
    fuzz.add_argument(
        "--isolate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run in a child process so that a crash becomes a finding (default: on for cuda)",
    )
    add_ranks(fuzz, default=None)
    fuzz.add_argument("--program-file", type=Path, help=argparse.SUPPRESS)


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    if args.ranks is not None:
        return run_on_ranks(args, list(argv), "fuzz")
    run = resolve_run(args)
    writable_dir(args.report, "--report")
    config = campaign_config(args, run, args.report)
    isolate = args.isolate if args.isolate is not None else run.kind == "cuda"
    if isolate:
        status, crashed = run_isolated(list(argv), config)
        if crashed is not None:
            print_findings(crashed)
            print(crashed.summary_line())
        return status
    with progress_bar(quiet=args.quiet) as (start, advance):
        start("fuzz", config.examples)
        result = run_campaign(config, progress=advance)
    print_findings(result)
    print(result.summary_line())
    if any(f.kind == HARNESS_ERROR for f in result.findings):
        return EXIT_HARNESS
    return EXIT_FOUND if result.findings else EXIT_OK
