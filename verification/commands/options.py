"""What every subcommand of ``python -m verification`` shares on the command line.

:func:`add_common` adds the campaign options (target, device, contract, budget, sizes) and
:func:`at_least` parses their counts; :func:`resolve_run` turns the target and device options
into a :class:`Run`, the one value below which no name is resolved again; :func:`writable_dir`
checks a directory argument before a run starts, so a bad ``--out`` or ``--report`` is a
one-line usage error, not a failure after minutes of work, and :func:`remove_new_outputs`
takes away what a failed or interrupted command created there; :func:`campaign_config` turns
the options into the one configuration a command passes down, on the target and device kind
of its run; :func:`print_finding` is the one way a command prints a finding with its
reproducer.
"""

from __future__ import annotations

import argparse
import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from verification import bounds
from verification.devices import DEVICE_CHOICES, DeviceKind, resolve_kind
from verification.errors import UsageError
from verification.findings import exit_status
from verification.fuzz import CampaignConfig, CampaignResult
from verification.targets import DEFAULT_TARGET, Target, load_target
from verification.targets.contracts import CONTRACTS
from verification.targets.upstream import add_target_path


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


def positive_seconds(text: str) -> float:
    """An argparse ``type`` for a positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def budget_seconds(text: str) -> float:
    """``positive_seconds``, or ``none`` (infinity): no time budget, the example counts alone."""
    return math.inf if text.strip().lower() == "none" else positive_seconds(text)


def add_common(parser: argparse.ArgumentParser, defaults: bool) -> None:
    """Options of the campaign commands; ``defaults=False`` leaves budgets to certify's profile."""
    from_profile = "" if defaults else " (default: the profile's)"
    parser.add_argument(
        "--target", default=DEFAULT_TARGET, metavar="MODULE", help="importable module under test"
    )
    add_target_path(parser)
    add_device(parser)
    add_hang_bound(parser)
    parser.add_argument(
        "--contract",
        help=f"break contract to judge by ({', '.join(CONTRACTS)}); "
        "default: the one the target declares, else out-buffer",
    )
    parser.add_argument(
        "--examples",
        type=at_least(1),
        default=100 if defaults else None,
        help="random programs to draw" + from_profile,
    )
    parser.add_argument(
        "--seed",
        type=at_least(0),
        default=0,
        help="hypothesis seed: the same seed draws the same programs",
    )
    parser.add_argument(
        "--max-ops",
        type=at_least(1),
        default=8 if defaults else None,
        help="most ops in one program" + from_profile,
    )
    parser.add_argument(
        "--max-breaks",
        type=at_least(0),
        default=3 if defaults else None,
        help="most eager breaks in one program" + from_profile,
    )
    parser.add_argument(
        "--replays",
        type=at_least(3),
        default=3 if defaults else None,
        help="replays of each captured graph compared with eager (at least 3)" + from_profile,
    )
    add_quiet(parser)


def add_device(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        dest="device_choice",
        default="auto",
        choices=DEVICE_CHOICES,
        help="auto: the GPU if torch sees one, else the CUDA simulator",
    )


def add_hang_bound(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--hang-seconds",
        type=positive_seconds,
        default=bounds.DEFAULT_S,
        metavar="SECONDS",
        help="a call into the target (capture, replay, break) that does not return within "
        "this is a hang finding, and the run goes on",
    )


def add_quiet(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress bar (it is drawn only on a terminal anyway)",
    )


def add_report(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--report", type=Path, metavar="DIR", help="write reproducer scripts there (default: none)"
    )


# Output directories this command will create: removed again if it ends by a usage error or
# Ctrl-C, so that a failed command leaves nothing behind.
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


def forget_new_outputs() -> None:
    """Starts a command with nothing to remove (main may run several in one process)."""
    _NEW_OUTPUTS.clear()


def remove_new_outputs() -> None:
    """Removes what the output directories checked by :func:`writable_dir` became, where the
    command created them; called when it fails by a usage error or an interrupt."""
    for directory in _NEW_OUTPUTS:
        shutil.rmtree(directory, ignore_errors=True)
    _NEW_OUTPUTS.clear()


@dataclass(frozen=True)
class Run:
    """What a command runs on, resolved once from its arguments: the ``target`` loaded with
    its contract, the device ``kind`` that runs it, and the wall-clock ``budget_s`` the
    command's ``--budget`` comes to (None: the example counts alone). Everything below the
    command takes these, never a module name or a device choice to resolve again."""

    target: Target
    kind: DeviceKind
    budget_s: float | None = None


def resolve_run(args: argparse.Namespace, budget_s: float | None = None) -> Run:
    """The :class:`Run` that ``args`` name: the device choice resolved first (asking for a
    GPU that is not there is the first error), then the target loaded under ``--contract``."""
    kind = resolve_kind(args.device_choice)
    return Run(load_target(args.target, getattr(args, "contract", None)), kind, budget_s)


def campaign_config(args: argparse.Namespace, run: Run, report_dir: Path | None) -> CampaignConfig:
    """The campaign the shared options describe, on the target and device kind of ``run``."""
    return CampaignConfig(
        target=run.target,
        kind=run.kind,
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


def add_ranks(parser: argparse.ArgumentParser, default: int | None) -> None:
    parser.add_argument(
        "--ranks",
        type=at_least(2),
        default=default,
        metavar="N",
        help="run each program on N ranks (gloo processes on the simulator, NCCL on one GPU "
        "each), its collectives as eager breaks; ranks must agree on every break and capture",
    )


def run_on_ranks(args: argparse.Namespace, argv: list[str] | tuple[str, ...], check: str) -> int:
    """``fuzz --ranks N`` (``check="fuzz"``) or ``check ranks``: the ranks' findings printed
    with their reproducers; the exit status as the other commands'."""
    from verification.ranks import RanksConfig, run_ranks

    run = resolve_run(args)
    if run.kind == "cuda":
        import torch

        if torch.cuda.device_count() < args.ranks:
            raise UsageError(
                f"--ranks {args.ranks} needs {args.ranks} GPUs on --device cuda; torch sees "
                f"{torch.cuda.device_count()}"
            )
    writable_dir(args.report, "--report")
    hang_s = args.hang_seconds
    config = RanksConfig(
        target=run.target,
        kind=run.kind,
        world=args.ranks,
        examples=args.examples,
        seed=args.seed,
        max_ops=getattr(args, "max_ops", None) or 8,
        max_breaks=getattr(args, "max_breaks", None) or 3,
        replays=getattr(args, "replays", None) or 3,
        # A collective waits at most a third of the example's bound, so that the rank left
        # waiting reports its timeout before the parent's bound kills it.
        collective_s=min(10.0, hang_s / 3),
        example_s=hang_s,
        report_dir=args.report,
        command=" ".join(["python -m verification", *argv]),
    )
    result = run_ranks(config, check)
    for finding, text in zip(result.findings, result.reproducers):
        print_finding(finding.summary(), text)
    for path in result.reproducer_paths:
        print(f"reproducer written to {path}")
    for note in result.notes:
        print(f"check {check}: {note}")
    print(result.summary_line(check))
    return exit_status(result.findings)
