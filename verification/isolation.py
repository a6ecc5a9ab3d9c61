"""The one way the harness starts a child ``python -m verification``: so that a crash of the
target (a signal, an abort in CUDA) ends the child, not the command, and becomes a finding.

Every front end that isolates work passes its child's argv to :func:`run_child`; this is the
only place a configuration turns back into a command line. A child that lays breadcrumbs is
killed once it has a call open and its trail has not moved for :func:`stall_s` (a call stuck
where the in-process bound cannot reach it: in C code, or off the main thread), and says so
(:attr:`ChildRun.hung`). :func:`cores` says how many children may run at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from verification import bounds
from verification.breadcrumbs import ENV, open_calls
from verification.errors import raise_if_interrupted

# How long a child's trail may stand still, in bounds on one call: past the bound its own
# timer ends a call stuck in Python, so a child past twice the bound is stuck where it cannot.
STALL_BOUNDS = 2


def stall_s() -> float:
    """Seconds a child may have a call open without its trail moving."""
    return STALL_BOUNDS * bounds.current()


def stalled(trail: Path) -> list[str]:
    """The calls a child left open (:func:`~verification.breadcrumbs.open_calls`) when its
    trail has not moved for :func:`stall_s`; empty while it moves, or has none open."""
    try:
        quiet = time.time() - trail.stat().st_mtime
    except OSError:
        return []
    return open_calls(trail) if quiet > stall_s() else []


@dataclass
class ChildRun:
    """How a child ended: its status (negative: the signal that ended it), its stderr when
    captured, and the calls it had open when it was killed for standing still (else empty)."""

    returncode: int
    stderr: str = ""
    hung: tuple[str, ...] = ()


def run_child(
    argv: Sequence[str], capture_stderr: bool = False, breadcrumbs: Path | None = None
) -> ChildRun:
    """Runs ``python -m verification <argv>`` to the end; stderr is captured when asked
    (and then echoed, so that the user still sees it); the child lays its breadcrumbs
    (:mod:`verification.breadcrumbs`) in ``breadcrumbs`` when given, and is killed when they
    stand still with a call open (:func:`stalled`)."""
    env = None if breadcrumbs is None else {**os.environ, ENV: str(breadcrumbs)}
    child = subprocess.Popen(
        [sys.executable, "-m", "verification", *argv],
        stderr=subprocess.PIPE if capture_stderr else None,
        text=True,
        env=env,
    )
    hung: list[str] = []
    err = ""
    try:
        while True:
            try:
                _, err = child.communicate(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                raise_if_interrupted()  # a Ctrl-C a destructor here swallowed
                if breadcrumbs is not None and not hung:
                    hung = stalled(breadcrumbs)
                    if hung:
                        child.kill()
    except BaseException:
        # An isolated child ignores Ctrl-C (its parent reports it): it is ended here, and
        # waited for, before the caller removes what the child still writes to.
        child.kill()
        child.wait()
        raise
    if capture_stderr:
        sys.stderr.write(err or "")
    return ChildRun(child.returncode, err or "", tuple(hung))


def signal_name(status: int) -> str:
    """``SIGSEGV`` for a child's status -11; the number when it names no signal."""
    number = -status
    return (
        signal.Signals(number).name if number in signal.Signals._value2member_map_ else str(number)
    )


def cores() -> int:
    """Cores this process may run on (a container's limit, where the OS reports it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
