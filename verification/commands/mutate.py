"""The ``mutate`` subcommand: ``python -m verification mutate --target MODULE ...``.

It prints one line per mutant and the score, lists survivors with their diffs and hints, and
with ``--report DIR`` writes ``mutation.json``, ``mutation.md`` and the cosmic-ray session.
Exit 0 when the score reaches ``--min-score`` (default 0), 1 below it, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from verification.commands.options import add_device, add_quiet, at_least, writable_dir
from verification.commands.progress import progress_bar
from verification.devices import DeviceKind, resolve_kind
from verification.mutation.engine import MutationConfig, MutationResult, run_mutation
from verification.mutation.summary import score_line, write
from verification.targets import DEFAULT_TARGET


def add_parser(commands: argparse._SubParsersAction) -> None:
    mutate = commands.add_parser(
        "mutate", help="mutation score: how many mutants of the target the harness kills"
    )
    mutate.add_argument(
        "--target", default=DEFAULT_TARGET, metavar="MODULE", help="importable module to mutate"
    )
    add_device(mutate)
    mutate.add_argument(
        "--budget", type=at_least(1), help="sample this many mutants (default: all of them)"
    )
    mutate.add_argument("--jobs", type=at_least(1), default=1, help="mutants judged in parallel")
    mutate.add_argument(
        "--seed", type=at_least(0), default=0, help="seed of the mutant sample and of the fuzzing"
    )
    mutate.add_argument(
        "--examples", type=at_least(1), default=100, help="fuzz examples per mutant"
    )
    mutate.add_argument(
        "--unit-tests", metavar="CMD", help="shell command run first; it kills what it can"
    )
    mutate.add_argument(
        "--no-harness", action="store_true", help="run only --unit-tests against the mutants"
    )
    mutate.add_argument(
        "--line",
        action="append",
        type=_place,
        default=[],
        metavar="FILE:LINE",
        help="only mutants on this line (repeatable), e.g. breakable_cudagraph/arguments.py:70",
    )
    mutate.add_argument(
        "--min-score", type=float, default=0.0, help="exit 1 below this score (0 to 1)"
    )
    mutate.add_argument(
        "--report",
        type=Path,
        metavar="DIR",
        help="write mutation.json, mutation.md and the session there (default: none)",
    )
    add_quiet(mutate)


def _place(text: str) -> tuple[str, int]:
    file, _, line = text.rpartition(":")
    if not file or not line.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not FILE:LINE")
    return file, int(line)


def config_from(args: argparse.Namespace, kind: DeviceKind) -> MutationConfig:
    return MutationConfig(
        target=args.target,
        kind=kind,
        budget=args.budget,
        jobs=args.jobs,
        seed=args.seed,
        examples=args.examples,
        unit_tests=args.unit_tests,
        harness=not args.no_harness,
        lines=tuple(args.line),
        session=args.report / "session.sqlite" if args.report else None,
        progress=lambda text: print(text, flush=True),
    )


def print_survivors(result: MutationResult) -> None:
    for mutant in result.survivors:
        hint = f"  (hint: {mutant.hint})" if mutant.hint else ""
        print(f"SURVIVOR {mutant.label}{hint}")
        print(mutant.diff.rstrip())


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    # The target stays a module name: each mutant is imported afresh in the children.
    kind = resolve_kind(args.device_choice)
    writable_dir(args.report, "--report")
    config = config_from(args, kind)
    with progress_bar(quiet=args.quiet) as (start, advance):
        config.on_total = lambda total: start("mutate", total, "mutants")
        config.on_judged = advance
        result = run_mutation(config)
    print_survivors(result)
    print(score_line(result))
    if args.report:
        write(result, args.report, "python -m verification " + shlex.join(argv))
        print(f"mutation report written to {args.report}", file=sys.stderr)
    return 0 if result.score >= args.min_score else 1
