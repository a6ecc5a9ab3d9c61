"""What every subcommand of ``python -m verification`` shares on the command line.

:func:`writable_dir` checks a directory argument before a run starts, so a bad ``--out`` or
``--report`` is a one-line usage error, not a failure after minutes of work;
:func:`campaign_config` turns the campaign options every command shares into a config;
:func:`print_findings` prints a campaign's findings, each with its reproducer script.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from verification.devices import UsageError
from verification.fuzz import CampaignConfig, CampaignResult


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


def campaign_config(args: argparse.Namespace, report_dir: Path | None) -> CampaignConfig:
    """The campaign the shared options (target, device, budget, sizes, contract) describe."""
    return CampaignConfig(
        target=args.target,
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


def print_findings(result: CampaignResult) -> None:
    """Each finding with its reproducer, then where the reproducer files were written."""
    for finding, text in zip(result.findings, result.reproducers):
        print(f"FINDING {finding.summary()}")
        print("---- reproducer ----")
        print(text)
        print("--------------------")
    for path in result.reproducer_paths:
        print(f"reproducer written to {path}")
