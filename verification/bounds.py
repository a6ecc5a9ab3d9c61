"""Bounds on the harness's calls into a target: a call that does not return is a finding.

A block run under :func:`bounded` (a capture, a replay, a scenario's calls) may go at most the
process's bound (:func:`limit`, resolved once where a command starts; :data:`DEFAULT_S`
otherwise) without any thread entering or leaving a call (:mod:`verification.breadcrumbs`):
past it an interval timer's SIGALRM raises :class:`Hang` inside the block, in the main thread,
naming the block and the calls open in it. A signal interrupts Python code and
lock waits (``Lock.acquire`` on POSIX), so a target deadlocking on its own lock is caught.
Off the main thread, or where there is no ``SIGALRM``, a block is bounded by nothing here: the
wall bound on the process that runs the check (:func:`verification.isolation.run_child`) is the
bound there, as it is for a call stuck in C code that never returns to Python.
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

from verification import breadcrumbs

# Seconds a call may run without returning: generous, since a capture on a GPU compiles and
# autotunes, and a hang is not a slow call but one that never returns.
DEFAULT_S = 60.0
_limit = DEFAULT_S
# The blocks open in the main thread, outermost first: what each runs, and how many calls
# were open in the thread when it began.
_blocks: list[tuple[str, int]] = []
_armed_s = DEFAULT_S
_previous: Any = None


class Hang(BaseException):
    """A call under :func:`bounded` did not return within the bound. A ``BaseException``, so
    that neither the target's nor the harness's ``except Exception`` takes it for an error of
    the call's own: the harness turns it into a finding where it knows what was run."""

    def __init__(self, what: str, seconds: float, inside: str = "") -> None:
        super().__init__(what, seconds, inside)
        self.what = what
        self.seconds = seconds
        self.inside = inside

    def words(self) -> str:
        """``hang: replay 2 did not return within 60 s (decorated break f > replay())``."""
        where = f" ({self.inside})" if self.inside else ""
        return f"hang: {self.what} did not return within {self.seconds:g} s{where}"

    def __str__(self) -> str:
        return self.words()


def current() -> float:
    """The bound in force, in seconds (``math.inf``: none)."""
    return _limit


def set_limit(seconds: float) -> None:
    """Sets the process's bound: what a command's ``--hang-seconds`` comes to."""
    global _limit
    if not seconds > 0:
        raise ValueError(f"a bound must be a positive number of seconds, got {seconds}")
    _limit = seconds


@contextlib.contextmanager
def limit(seconds: float) -> Iterator[None]:
    """The bound is ``seconds`` inside the block (a test's short bound), then what it was."""
    before = _limit
    set_limit(seconds)
    try:
        yield
    finally:
        set_limit(before)


def _armable() -> bool:
    """Whether a block begun now is bounded: in the main thread, where signals are delivered,
    inside a bounded block or with a timer and a finite bound to arm."""
    if threading.current_thread() is not threading.main_thread():
        return False
    return bool(_blocks) or (hasattr(signal, "setitimer") and math.isfinite(_limit))


def _ring(signum: int, frame: FrameType | None) -> None:
    if not _blocks:
        return  # the last block ended as the timer rang
    quiet = time.monotonic() - breadcrumbs.progress()
    if quiet < _armed_s:  # a call was entered or left since: the bound starts there
        signal.setitimer(signal.ITIMER_REAL, _armed_s - quiet)
        return
    what, depth = _blocks[-1]
    inside = " > ".join(breadcrumbs.open_here()[depth + 1 :])
    raise Hang(what, _armed_s, inside)


@contextlib.contextmanager
def bounded(what: str) -> Iterator[None]:
    """Runs the block as the call ``what`` (a breadcrumb of its own), raising :class:`Hang`
    when the bound passes in it with no thread entering or leaving a call; nested
    blocks share the outermost one's timer, each named by its own ``what``."""
    global _previous, _armed_s
    if not _armable():
        with breadcrumbs.calling(what):
            yield
        return
    outermost = not _blocks
    _blocks.append((what, len(breadcrumbs.open_here())))
    breadcrumbs.enter(what)
    if outermost:
        _armed_s = _limit
        _previous = signal.signal(signal.SIGALRM, _ring)
        # Python's handlers interrupt system calls (no SA_RESTART), which is what ends a
        # lock wait: glibc restarts one otherwise. Python retries its own interrupted calls.
        signal.setitimer(signal.ITIMER_REAL, _armed_s)
    try:
        yield
    finally:
        breadcrumbs.leave(what)
        _blocks.pop()
        if outermost:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, _previous if _previous is not None else signal.SIG_DFL)
        else:  # the outer block goes on, maybe after handling a Hang that disarmed nothing
            signal.setitimer(signal.ITIMER_REAL, _armed_s)
