"""A target that fulfils some of its caller's duties itself, with one planted bug in a duty it
declares, for the check that must find it.

The target is :mod:`verification.planted.vllm_minimal` judged by vLLM's contract
(``out-buffer``), taking ``capture_error_mode``, and declaring ``GUARDS = ("collector",
"one-capturing-thread")``: it pauses the collector itself (the library's counted pause) and
lets any number of threads capture at once, each in its own region, but captures on its
caller's current stream, as vLLM's module does, relying on the runner for a stream of its own.
The harness therefore still captures from a side stream for it, and checks the two declared
duties without helping. :func:`build` plants one of :data:`BUGS`; each is a mistake an engine's
own guard has made or risks (``results/upstream/README.md``).
"""

from __future__ import annotations

import gc
from types import SimpleNamespace
from typing import Any

import torch

from verification.planted import vllm_minimal
from verification.targets.contracts import COLLECTOR, ONE_CAPTURING_THREAD

GUARDED = (COLLECTOR, ONE_CAPTURING_THREAD)

# name -> (what it plants, the property that must find it)
BUGS: dict[str, tuple[str, str]] = {
    "collector_frozen_only": (
        "the collector 'paused' with gc.freeze() alone, as SGLang's freeze_gc pauses it: it "
        "still runs, and frees a graph whose last holder became garbage during the capture",
        "faults",
    ),
    "collector_enabled_on_exit": (
        "the collector turned on when a capture closes, even where the caller had it off (an "
        "engine that disables it for its whole capture loop gets it back after one capture)",
        "faults",
    ),
    "device_synced_per_segment": (
        "a device-wide torch.cuda.synchronize() as each segment begins, as torch.cuda.graph's "
        "__enter__ does (piecewise-cuda-graphs' P5): it waits on another thread's capturing "
        "stream, which CUDA refuses",
        "threads",
    ),
}


class _Capture(vllm_minimal._Capture):
    """vLLM's minimal capture with a mode; ``bugs`` as :func:`build` sets it."""

    def __init__(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        super().__init__(pool)
        self.capture_error_mode = capture_error_mode

    def _open_segment(self) -> None:
        if "device_synced_per_segment" in self.bugs:
            torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        graph.capture_begin(pool=self.pool, capture_error_mode=self.capture_error_mode)
        self._graph = graph

    def _pause_collector(self) -> None:
        if "collector_frozen_only" in self.bugs:
            gc.freeze()
        elif "collector_enabled_on_exit" in self.bugs:
            gc.disable()
        else:
            super()._pause_collector()

    def _resume_collector(self) -> None:
        if "collector_frozen_only" in self.bugs:
            gc.unfreeze()
        elif "collector_enabled_on_exit" in self.bugs:
            gc.enable()
        else:
            super()._resume_collector()


def build(bug: str | None = None) -> SimpleNamespace:
    """The declaring target with ``bug`` planted (``None``: the correct one)."""
    if bug is not None and bug not in BUGS:
        raise ValueError(f"unknown planted bug {bug!r}; choose one of {', '.join(BUGS)}")
    bugs = frozenset({bug} if bug else ())
    capture = type("BreakableCUDAGraphCapture", (_Capture,), {"bugs": bugs})
    return SimpleNamespace(
        __name__=f"duty_targets[{bug or 'clean'}]",
        BreakableCUDAGraphCapture=capture,
        eager_break_during_capture=vllm_minimal._decorator(bugs),
        BREAK_CONTRACT="out-buffer",
        GUARDS=GUARDED,
        REPRODUCER_IMPORT=(
            f"from verification.planted.duty_targets import build\ntarget = build({bug!r})"
        ),
    )


# The correct target as a module: ``--target verification.planted.duty_targets``.
BreakableCUDAGraphCapture = build().BreakableCUDAGraphCapture
eager_break_during_capture = vllm_minimal._decorator(frozenset())
BREAK_CONTRACT = "out-buffer"
GUARDS = GUARDED
