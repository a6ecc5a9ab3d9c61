"""The library as a target whose first replay in the process never returns: it waits for an
event nobody sets. Every later replay is the library's own, so a harness that goes on after
the hang checks the rest of its examples as usual."""

from __future__ import annotations

import threading

import breakable_cudagraph
from breakable_cudagraph import eager_break_during_capture

__all__ = ["BreakableCUDAGraphCapture", "eager_break_during_capture"]
BREAK_CONTRACT = "returns"
FIRST_REPLAY_DONE = threading.Event()


class BreakableCUDAGraphCapture(breakable_cudagraph.BreakableCUDAGraphCapture):
    def replay(self) -> None:
        if not FIRST_REPLAY_DONE.is_set():
            FIRST_REPLAY_DONE.set()
            threading.Event().wait()  # set by nobody
        super().replay()
