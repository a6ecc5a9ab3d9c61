"""Per-thread state: the capture open in this thread and whether an eager step is running.

Captures belong to the thread that opened them (as CUDA stream capture in ``thread_local`` mode
does), so a capture open in one thread never turns another thread's decorated calls into breaks.
The eager-step depth lets a decorated call made from inside an eager step run inline.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_state = threading.local()


def active_capture() -> Any | None:
    """The capture open in this thread, or None."""
    return getattr(_state, "capture", None)


def set_active_capture(capture: Any | None) -> None:
    _state.capture = capture


def in_eager_step() -> bool:
    """True while this thread runs the body of an eager step (at capture or at replay)."""
    return getattr(_state, "eager_depth", 0) > 0


@contextmanager
def eager_step_running() -> Iterator[None]:
    _state.eager_depth = getattr(_state, "eager_depth", 0) + 1
    try:
        yield
    finally:
        _state.eager_depth -= 1
