"""Per-thread state: the capture open in this thread and whether an eager step is running.

Captures belong to the thread that opened them (as CUDA stream capture in ``thread_local`` mode
does), so a capture open in one thread never turns another thread's decorated calls into breaks.
The eager-step depth lets a decorated call made from inside an eager step run inline.
"""

from __future__ import annotations

import threading
from typing import Any


class _ThreadState(threading.local):
    # Class-level defaults: a thread that has set nothing reads them without the AttributeError
    # that getattr's default would otherwise catch, which cost more than the rest of a
    # decorated call's check. getattr stays below for a plain namespace put in
    # ``_state``'s place (verification/planted).
    capture: Any = None
    eager_depth: int = 0


_state = _ThreadState()


def active_capture() -> Any | None:
    """The capture open in this thread, or None."""
    return getattr(_state, "capture", None)


def break_target() -> Any | None:
    """The capture a decorated call made now must break: the one open in this thread, or None
    when there is none or an eager step is running (the call then runs inline)."""
    state = _state
    if getattr(state, "eager_depth", 0) > 0:
        return None
    return getattr(state, "capture", None)


def set_active_capture(capture: Any | None) -> None:
    _state.capture = capture


def in_eager_step() -> bool:
    """True while this thread runs the body of an eager step (at capture or at replay)."""
    return getattr(_state, "eager_depth", 0) > 0


def enter_eager_step() -> None:
    """Mark an eager step running; pair with :func:`exit_eager_step` in a ``finally``.

    Plain functions rather than a context manager: replay calls them once per break, and a
    generator-based context manager costs more than a short eager step itself.
    """
    _state.eager_depth = getattr(_state, "eager_depth", 0) + 1


def exit_eager_step() -> None:
    _state.eager_depth -= 1
