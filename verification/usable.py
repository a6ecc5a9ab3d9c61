"""Whether a target can still capture in this process: the probe run after a finding.

:func:`unusable` says why not (a capture left active in the thread, a stream left capturing,
or a fresh capture with one break that raises when made or replayed), or None. A search stops
there, and the checks after it are skipped: what followed would only report that leftover.
Wrong values are not asked about: a target whose every replay is wrong is buggy, not spent.
"""

from __future__ import annotations

from typing import Any

import torch

from verification import bounds
from verification.causes import Cause, Problem, describe
from verification.execute import collector_paused

# What a leftover blames, whichever check comes upon it: the same state is one cause.
LEFT_CAPTURING = Cause("stream-capturing")
LEFT_ACTIVE = Cause("fault-cleanup", "a capture left active in the thread")


def left_over(target: Any) -> str | None:
    """What an earlier example left behind that a new one would take for its own finding: a
    capture still active in this thread, or the caller's stream still capturing; cheap enough
    to ask before every example."""
    try:
        if target.BreakableCUDAGraphCapture.current() is not None:
            return Problem("a capture is left active in this thread", LEFT_ACTIVE)
    except Exception:  # a target without current(), or one that raises: unusable() tells
        return None
    if torch.cuda.is_current_stream_capturing():
        return Problem("the caller's stream is left capturing", LEFT_CAPTURING)
    return None


def unusable(target: Any, device: str) -> str | None:
    """Why ``target`` (anything with ``BreakableCUDAGraphCapture`` and
    ``eager_break_during_capture``) cannot be used any more here, or None; a probe that does
    not return within the bound (:mod:`verification.bounds`) says so."""
    try:
        with bounds.bounded("a fresh capture with one break"):
            return _probe(target, device)
    except bounds.Hang as hang:
        return hang.words()


def _probe(target: Any, device: str) -> str | None:
    try:
        if target.BreakableCUDAGraphCapture.current() is not None:
            return "a capture is left active in this thread"
        if torch.cuda.is_current_stream_capturing():
            return "the caller's stream is left capturing"

        @target.eager_break_during_capture
        def halve(t: torch.Tensor) -> None:
            t.mul_(0.5)

        x = torch.ones(4, device=device)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), collector_paused():
            capture = target.BreakableCUDAGraphCapture(pool=torch.cuda.graph_pool_handle())
            with capture:
                y = x * 2
                halve(y)
                z = y + 1
        torch.cuda.current_stream().wait_stream(side)
        capture.replay()
        torch.cuda.synchronize()
        del z
        reset = getattr(capture, "reset", None)
        if callable(reset):
            reset()
    except Exception as error:
        return f"a fresh capture with one break raises {describe(error)}"
    return None
