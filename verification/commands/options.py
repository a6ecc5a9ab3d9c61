"""What every subcommand of ``python -m verification`` shares on the command line.

:func:`add_common` adds the campaign options (target, device, contract, budget, sizes) and
:func:`at_least` parses their counts; :func:`writable_dir` checks a directory argument
before a run starts, so a bad ``--out`` or ``--report`` is a one-line usage error, not a
failure after minutes of work; :func:`campaign_config` turns the options into the one
configuration a command passes down, with the target it loaded once; :func:`print_finding`
is the one way a command prints a finding with its reproducer.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from verification.contracts import CONTRACTS
from verification.devices import DEVICE_CHOICES
from verification.errors import UsageError
from verification.fuzz import CampaignConfig, CampaignResult
from verification.targets import DEFAULT_TARGET, Target


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type`` for an integer count of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def add_common(parser: argparse.ArgumentParser, defaults: bool) -> None:
    """Options of the campaign commands; ``defaults=False`` leaves budgets to certify's profile."""
    parser.add_argument("--target", default=DEFAULT_TARGET, help="importable module under test")
    parser.add_argument("--device", default="auto", choices=DEVICE_CHOICES)
    parser.add_argument(
        "--contract",
        help=f"break contract to judge by ({', '.join(CONTRACTS)}); default: the target's own",
    )
    parser.add_argument("--examples", type=at_least(1), default=100 if defaults else None)
    parser.add_argument("--seed", type=at_least(0), default=0)
    parser.add_argument("--max-ops", type=at_least(1), default=8 if defaults else None)
    parser.add_argument("--max-breaks", type=at_least(0), default=3 if defaults else None)
    parser.add_argument("--replays", type=at_least(3), default=3 if defaults else None)


def writable_dir(path: Path | None, option: str) -> None:
    """Creates ``path`` now and proves it writable; ``option`` names it in the error."""
    if path is None:
        return
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-probe"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise UsageError(f"{option} {path}: cannot write there ({error.strerror})") from None


def campaign_config(
    args: argparse.Namespace, target: Target, report_dir: Path | None
) -> CampaignConfig:
    """The campaign the shared options describe, on the ``target`` the command loaded."""
    return CampaignConfig(
        target=target,
        device=args.device,
        examples=args.examples,
        seed=args.seed,
        max_ops=args.max_ops,
        max_breaks=args.max_breaks,
        replays=args.replays,
        report_dir=report_dir,
        program_file=getattr(args, "program_file", None),
        contract=args.contract,
    )


def print_finding(summary: str, reproducer: str | None = None) -> None:
    """One finding, and its reproducer script when it has one."""
    print(f"FINDING {summary}")
    if reproducer is not None:
        print("---- reproducer ----")
        print(reproducer.rstrip("\n"))
        print("--------------------")


def print_findings(result: CampaignResult, check: str | None = None) -> None:
    """A campaign's findings with their reproducers, then where the reproducers were written;
    ``check`` prefixes each summary with the certify check that found it."""
    for finding, text in zip(result.findings, result.reproducers):
        print_finding(f"{check} {finding.summary()}" if check else finding.summary(), text)
    for path in result.reproducer_paths:
        print(f"reproducer written to {path}")
