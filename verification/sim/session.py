"""State of one simulator session: allocator, default stream, captures in progress.

Created by the outermost ``simulated_cuda()`` entry and closed by its exit, which is
the only point where released block memory (the quarantine) is really freed.
"""

from __future__ import annotations

import threading
from typing import Any

from verification.sim import cuda_errors
from verification.sim.allocator import Allocator
from verification.sim.capture_rules import strict_from_environment
from verification.sim.device_rng import DeviceRNG
from verification.sim.races import RaceDetector
from verification.sim.races import enabled_by_environment as races_from_environment
from verification.sim.streams import Stream, current_stream
from verification.sim.transfers import PinnedMemory

# torch hands out ``torch.cuda.Stream()`` round robin from a pool of 32 CUDA streams per
# priority, so the caching allocator's per-stream blocks come back to every 32nd new stream;
# keyed by simulated stream alone, each capture's new side stream would take new segments
# forever and the free lists grow with every capture.
_STREAM_POOL = 32


def _pooled_stream() -> int:
    stream_id = current_stream().stream_id
    return 0 if stream_id == 0 else 1 + (stream_id - 1) % _STREAM_POOL


class Session:
    def __init__(self) -> None:
        self.allocator = Allocator(on_growth=self.check_growth, stream_of=_pooled_stream)
        self.default_stream = Stream._default()
        self.captures: set[Any] = set()
        self.lock = threading.RLock()
        # The stream a backward pass in progress was called on (autograd's device thread
        # runs it; see patching.autograd_on_caller_stream).
        self.autograd_stream: Stream | None = None
        self.pinned = PinnedMemory()
        self.rng = DeviceRNG()
        self.warm_libraries: set[str] = set()  # device libraries whose handle exists
        # Kernels run eagerly, for the first-use rule of strict warm-up mode (capture_rules).
        self.warm_kernels: set[tuple[Any, ...]] = set()
        self.strict_warmup = strict_from_environment()
        self.races: RaceDetector | None = (
            RaceDetector(self.allocator) if races_from_environment() else None
        )
        self.allocator.on_reuse = self._check_reuse

    def captures_forbidding_unsafe_calls(self) -> list[Any]:
        """The open captures that a potentially unsafe call made in this thread (cudaMalloc, a
        sync, destroying a graph) breaks: every "global" one, and the "thread_local" ones
        this thread began; "relaxed" ones never."""
        me = threading.get_ident()
        return [
            capture
            for capture in self.captures
            if capture.mode == "global" or (capture.mode == "thread_local" and capture.thread == me)
        ]

    def check_unsafe_call(self) -> None:
        """Raises for a potentially unsafe call that a capture on another stream forbids."""
        mine = current_stream().capture
        for capture in self.captures_forbidding_unsafe_calls():
            if capture is not mine:
                capture.invalidate()
                raise RuntimeError(cuda_errors.NOT_PERMITTED)

    def check_growth(self) -> None:
        """A new segment (cudaMalloc) while captures that forbid it are open.

        From a stream outside any capture it raises at once. From a capturing stream, as on
        the H200, the allocation goes through: every other forbidding capture is invalidated
        and the allocating capture's ``capture_end`` raises "not permitted".
        """
        mine = current_stream().capture
        if mine is None:
            self.check_unsafe_call()
            return
        others = [c for c in self.captures_forbidding_unsafe_calls() if c is not mine]
        if others:
            mine.invalidate(cuda_errors.NOT_PERMITTED)
            for capture in others:
                capture.invalidate(refuse_launches=False)

    def _check_reuse(self, block: Any) -> None:
        stream = current_stream()
        if self.races is not None and stream.capture is None:
            self.races.reuse(block.address, stream)

    def capturing_pools(self) -> set[Any]:
        return {capture.pool for capture in self.captures}

    def close(self) -> None:
        for capture in list(self.captures):
            capture.finish()
        self.captures.clear()
        self.allocator.quarantine.clear()
        self.pinned.clear()
