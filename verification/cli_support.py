"""What every subcommand of ``python -m verification`` shares on the command line.

:func:`writable_dir` checks a directory argument before a run starts, so a bad ``--out`` or
``--report`` is a one-line usage error, not a failure after minutes of work, and
:func:`remove_new_outputs` takes away what a failed or interrupted command created there;
:func:`campaign_config` turns the campaign options every command shares into a config;
:func:`print_findings` prints a campaign's findings, each with its reproducer script.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from verification.devices import UsageError
from verification.fuzz import CampaignConfig, CampaignResult

# Output directories this command will create: removed again if it ends by a usage error or
# Ctrl-C, so that a failed command leaves nothing behind (issue 24).
_NEW_OUTPUTS: list[Path] = []


def writable_dir(path: Path | None, option: str) -> None:
    """Proves ``path`` writable now, without leaving it created: the writers make it when
    their first file goes in. ``option`` names it in the error."""
    if path is None:
        return
    made: list[Path] = []
    try:
        for parent in reversed((path, *path.parents)):
            if not parent.exists():
                parent.mkdir()
                made.append(parent)
        if not path.is_dir():
            raise UsageError(f"{option} {path}: not a directory")
        probe = path / ".write-probe"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise UsageError(f"{option} {path}: cannot write there ({error.strerror})") from None
    finally:
        for directory in reversed(made):
            directory.rmdir()
    if made:
        _NEW_OUTPUTS.append(made[0])


def remove_new_outputs() -> None:
    """Removes what the output directories checked by :func:`writable_dir` became, where the
    command created them; called when it fails by a usage error or an interrupt."""
    for directory in _NEW_OUTPUTS:
        shutil.rmtree(directory, ignore_errors=True)
    _NEW_OUTPUTS.clear()


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
