"""The library with bugs only several ranks show: each is found by ``check ranks`` or
``fuzz --ranks 2`` through the part of it that must find it (:data:`FOUND_BY`).

:func:`build` wraps ``breakable_cudagraph``'s break decorator and capture set and plants one
of :data:`BUGS`; the rest is the library's own behaviour. A rank is the process group's rank
of the process that calls, as an engine's tensor-parallel worker reads it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch.distributed as dist

import breakable_cudagraph as lib

BUGS: dict[str, str] = {
    "rank_dependent_break": (
        "on rank 1 the first break of every capture runs inside the graph segment, so rank 1 "
        "places one break fewer than rank 0 and its replay skips a collective rank 0 runs"
    ),
    "collective_captured": (
        "the decorator takes a collective (a function named all_reduce*, all_gather*, "
        "reduce_scatter*) for capturable and runs it inside the segment, where the contract "
        "says it must be a break: on gloo nothing re-runs it at replay"
    ),
    "capture_set_rank_local": (
        "the capture set picks the size it replays from the batch and a rank-local value (the "
        "rank), so rank 1 replays a larger capture than rank 0 for the same batch"
    ),
    "hang_at_replay": "rank 1's break waits forever at its first replay (a lock never released)",
    "capture_awaits_peers": (
        "a capture opens with a barrier of the process group, as if every rank captured at "
        "once: a rank capturing while its peers run collectives eagerly meets their collective "
        "in its barrier"
    ),
}
# The violation of ``check ranks`` / ``fuzz --ranks`` that each bug must be found as; for
# ``invalidation``, any finding of the part of ``check ranks`` where one rank captures alone.
FOUND_BY: dict[str, str] = {
    "rank_dependent_break": "placement",
    "collective_captured": "mismatch",
    "capture_set_rank_local": "capture-set-size",
    "hang_at_replay": "rank-timeout",
    "capture_awaits_peers": "invalidation",
}
_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _decorator(bug: str | None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def eager_break_during_capture(fn: Callable[..., Any]) -> Callable[..., Any]:
        """The library's break, with ``bug`` planted."""
        broken = lib.eager_break_during_capture(fn)
        collective = getattr(fn, "__name__", "").startswith(_COLLECTIVES)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            capture = lib.BreakableCUDAGraphCapture.current()
            if capture is not None:
                if bug == "collective_captured" and collective:
                    return fn(*args, **kwargs)
                if bug == "rank_dependent_break" and _rank() == 1:
                    if not getattr(capture, "_planted_skipped", False):
                        capture._planted_skipped = True
                        return fn(*args, **kwargs)
            return broken(*args, **kwargs)

        if bug == "hang_at_replay":
            return lib.eager_break_during_capture(_waits_at_replay(fn))
        return wrapper

    return eager_break_during_capture


def _waits_at_replay(fn: Callable[..., Any]) -> Callable[..., Any]:
    captured, never = threading.Event(), threading.Event()

    @functools.wraps(fn)
    def step(*args: Any, **kwargs: Any) -> Any:
        if lib.BreakableCUDAGraphCapture.current() is not None:
            captured.set()
        elif captured.is_set() and _rank() == 1:
            never.wait()
        return fn(*args, **kwargs)

    return step


class _PeersAwaitedCapture(lib.BreakableCUDAGraphCapture):
    def __enter__(self) -> Any:
        if dist.is_available() and dist.is_initialized():
            dist.barrier()
        return super().__enter__()


class _RankLocalCaptureSet(lib.CaptureSet):
    """Replays the smallest size that fits the batch plus the rank (a per-rank value standing
    where every rank must use the same), the largest when none does."""

    def __call__(self, *inputs: Any) -> Any:
        ascending = self._ascending
        wanted = inputs[0].shape[0] + _rank() if inputs and hasattr(inputs[0], "shape") else 0
        self._ascending = [size for size in ascending if size >= wanted] or ascending[-1:]
        try:
            return super().__call__(*inputs)
        finally:
            self._ascending = ascending


def build(bug: str | None = None) -> SimpleNamespace:
    """The library with ``bug`` of :data:`BUGS` planted (None: the library as it is)."""
    if bug is not None and bug not in BUGS:
        raise ValueError(f"unknown planted bug {bug!r}; choose one of {', '.join(BUGS)}")
    return SimpleNamespace(
        __name__=f"rank_targets[{bug or 'clean'}]",
        BreakableCUDAGraphCapture=(
            _PeersAwaitedCapture if bug == "capture_awaits_peers" else lib.BreakableCUDAGraphCapture
        ),
        eager_break_during_capture=_decorator(bug),
        CaptureSet=_RankLocalCaptureSet if bug == "capture_set_rank_local" else lib.CaptureSet,
        BREAK_CONTRACT=lib.BREAK_CONTRACT,
        GUARDS_ITSELF=lib.GUARDS_ITSELF,
        REPRODUCER_IMPORT=(
            f"from verification.planted.rank_targets import build\ntarget = build({bug!r})"
        ),
    )
