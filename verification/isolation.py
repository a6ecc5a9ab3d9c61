"""The one way the harness starts a child ``python -m verification``: so that a crash of the
target (a signal, an abort in CUDA) ends the child, not the command, and becomes a finding.

Every front end that isolates work passes its child's argv to :func:`run_child`; this is the
only place a configuration turns back into a command line. :func:`cores` says how many
children may run at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from verification.breadcrumbs import ENV


def run_child(
    argv: Sequence[str], capture_stderr: bool = False, breadcrumbs: Path | None = None
) -> subprocess.CompletedProcess:
    """Runs ``python -m verification <argv>`` to the end; stderr is captured when asked
    (and then echoed, so that the user still sees it); the child lays its breadcrumbs
    (:mod:`verification.breadcrumbs`) in ``breadcrumbs`` when given."""
    env = None if breadcrumbs is None else {**os.environ, ENV: str(breadcrumbs)}
    done = subprocess.run(
        [sys.executable, "-m", "verification", *argv],
        stderr=subprocess.PIPE if capture_stderr else None,
        text=True,
        env=env,
    )
    if capture_stderr:
        sys.stderr.write(done.stderr or "")
    return done


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
