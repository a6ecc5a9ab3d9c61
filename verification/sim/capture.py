"""One capture in progress: its streams, recorded steps, pool and error state.

Streams forked into the capture carry vector clocks (how much work of each stream they
have waited for); ``capture_end`` accepts the capture only if the origin stream has
waited for all work of every forked stream, mirroring CUDA's unjoined-fork error.
"""

from __future__ import annotations

import threading
from typing import Any

from verification.sim import cuda_errors
from verification.sim.allocator import Pool
from verification.sim.recording import Step

CAPTURE_ERROR_MODES = ("global", "thread_local", "relaxed")


class Capture:
    def __init__(self, origin: Any, pool: Pool, mode: str) -> None:
        self.origin = origin
        self.pool = pool
        self.mode = mode
        self.thread = threading.get_ident()
        self.steps: list[Step] = []
        self.clocks: dict[Any, dict[Any, int]] = {origin: {origin: 0}}
        # What capture_end raises once CUDA has failed the capture (None while it is valid).
        self.error: str | None = None
        # Whether later launches into the failed capture raise at once. An illegal call does
        # that on the H200; another capture's allocation fails this one only at its end
        # (bench/probes/capture_semantics.py, merge_global and concurrent_growth).
        self.refuses_launches = True
        self.active = True
        origin.capture = self

    def clock_of(self, stream: Any) -> dict[Any, int]:
        return dict(self.clocks[stream])

    def fork(self, stream: Any, clock: dict[Any, int]) -> None:
        stream.capture = self
        self.clocks[stream] = {**clock, stream: 0}

    def merge(self, stream: Any, clock: dict[Any, int]) -> None:
        mine = self.clocks[stream]
        for other, count in clock.items():
            if count > mine.get(other, 0):
                mine[other] = count

    def add_step(self, stream: Any, step: Step | None) -> None:
        if step is not None:
            self.steps.append(step)
        clock = self.clocks[stream]
        clock[stream] = clock.get(stream, 0) + 1

    def unjoined(self) -> bool:
        seen = self.clocks[self.origin]
        return any(
            clock.get(stream, 0) > seen.get(stream, 0)
            for stream, clock in self.clocks.items()
            if stream != self.origin
        )

    @property
    def invalid(self) -> bool:
        return self.error is not None

    def invalidate(
        self, error: str = cuda_errors.INVALIDATED, refuse_launches: bool = True
    ) -> None:
        """Fails the capture; the first failure decides what ``capture_end`` raises, and
        whether later launches into it raise at once."""
        if self.error is None:
            self.error = error
            self.refuses_launches = refuse_launches

    def finish(self) -> None:
        """Takes every participating stream out of capture mode."""
        for stream in self.clocks:
            if stream.capture is self:
                stream.capture = None
        self.active = False
