"""Capture sets: one program captured at several batch sizes into one pool, replayed in any
order, as an engine's runner uses a breakable graph.

A :class:`CaptureSet` is plain data, drawn and shrunk by hypothesis (:func:`capture_sets`) and
printed in a reproducer: the batch sizes (captured largest first, all into one pool), the
order of replays (any order is legal, since each replay's outputs are read before the next),
the captures dropped and captured again once the others have replayed, and the streams of
capture and replay. :class:`CapturedSet` runs it: every program input has one static buffer
of the largest size, and the capture of size ``b`` reads its row ``b - 1``, so the captures
share the buffers as an engine's share its input buffers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from hypothesis import strategies as st

from verification.causes import within
from verification.programs import Program, make_inputs
from verification.properties.runs import CAPTURE_STREAMS, REPLAY_STREAMS, Hook, ProgramRun, Wrap

MAX_SIZE = 4


@dataclass(frozen=True)
class CaptureSet:
    """``sizes`` in capture order (largest first); ``replays`` and ``remake`` index ``sizes``;
    ``capture_stream`` of :data:`~verification.properties.runs.CAPTURE_STREAMS`,
    ``replay_stream`` of :data:`~verification.properties.runs.REPLAY_STREAMS`."""

    sizes: tuple[int, ...] = (1,)
    replays: tuple[int, ...] = (0,)
    remake: tuple[int, ...] = ()
    capture_stream: str = "runner"
    replay_stream: str = "default"

    def as_data(self) -> dict[str, Any]:
        """The set as a dict of plain values, which a reproducer prints and reads back."""
        return asdict(self)


def from_data(data: dict[str, Any] | None) -> CaptureSet:
    """The set :meth:`CaptureSet.as_data` wrote (None: one capture, replayed once)."""
    return CaptureSet(**data) if data else CaptureSet()


@st.composite
def _capture_sets(
    draw: st.DrawFn, max_captures: int, streams: tuple[str, ...] = CAPTURE_STREAMS
) -> CaptureSet:
    count = draw(st.integers(1, max_captures))
    sizes = tuple(
        sorted(
            draw(st.sets(st.integers(1, MAX_SIZE), min_size=count, max_size=count)), reverse=True
        )
    )
    index = st.integers(0, count - 1)
    replays = tuple(draw(st.lists(index, min_size=1, max_size=4)))
    # Dropping the only capture would leave no graph holding the pool to capture into again.
    remake = tuple(draw(st.lists(index, max_size=1))) if count > 1 else ()
    return CaptureSet(
        sizes,
        replays,
        remake,
        draw(st.sampled_from(streams)),
        draw(st.sampled_from(REPLAY_STREAMS)),
    )


def capture_sets(
    max_captures: int = 3, streams: tuple[str, ...] = CAPTURE_STREAMS
) -> st.SearchStrategy[CaptureSet]:
    """Capture sets of up to ``max_captures`` sizes, captured on one of ``streams`` (of
    :data:`~verification.properties.runs.CAPTURE_STREAMS`); shrinks towards one capture
    replayed once on the default stream."""
    return _capture_sets(max_captures, streams)


class CapturedSet:
    """Every size of ``capture_set`` captured by ``config.target`` into one pool."""

    def __init__(
        self,
        program: Program,
        capture_set: CaptureSet,
        config: Any,
        *,
        hook: Hook | None = None,
        wrap: Wrap | None = None,
    ) -> None:
        self.program = program
        self.set = capture_set
        self.config = config
        self.hook = hook
        self.wrap = wrap
        self.pool = torch.cuda.graph_pool_handle()
        values = make_inputs(program, config.seed, config.device)
        top = max(capture_set.sizes)
        self.buffers = [
            torch.empty((top, *value.shape), dtype=value.dtype, device=value.device)
            for value in values
        ]
        self.runs: list[ProgramRun | None] = [None] * len(capture_set.sizes)
        for index in range(len(capture_set.sizes)):
            self.runs[index] = self._capture(index)

    def _capture(self, index: int) -> ProgramRun:
        size = self.set.sizes[index]
        config = self.config
        return ProgramRun(
            self.program,
            config.target,
            config.kind,
            config.device,
            config.seed,
            pool=self.pool,
            hook=self.hook,
            wrap=self.wrap,
            static_inputs=[buffer[size - 1] for buffer in self.buffers],
            capture_stream=self.set.capture_stream,
            replay_stream=self.set.replay_stream,
        )

    def _where(self, index: int, replay: int) -> str:
        return (
            f"the capture of size {self.set.sizes[index]} (capture {index} of "
            f"{len(self.set.sizes)} sharing a pool, sizes {self.set.sizes}), replay {replay}"
        )

    def replays(self, check: bool = True) -> str | None:
        """Replays in the set's order, then drops each of ``remake``, replays the captures
        left, captures it again and replays it; each on fresh inputs compared with eager (when
        ``check``)."""
        seed = self.config.seed + 1
        order = [(index, False) for index in self.set.replays]
        order += [(index, True) for index in self.set.remake]
        for number, (index, again) in enumerate(order):
            if again:
                self._drop(index)
                # The captures left must replay as before: one dropped while others of its
                # pool live may take with it what they share (memory, an executable).
                for other, kept in enumerate(self.runs):
                    if kept is None:
                        continue
                    problem = (
                        kept.replay_problem(seed + number)
                        if check
                        else kept.problem or kept.replay()
                    )
                    if problem is not None:
                        return within(
                            f"{self._where(other, number)}, after capture {index} of the pool "
                            "was dropped: ",
                            problem,
                        )
                self.runs[index] = self._capture(index)
            run = self.runs[index]
            assert run is not None
            problem = run.replay_problem(seed + number) if check else run.problem or run.replay()
            if problem is not None:
                again_text = " after it was dropped and captured again" if again else ""
                return within(f"{self._where(index, number)}{again_text}: ", problem)
        return None

    def each_run(self) -> list[ProgramRun]:
        return [run for run in self.runs if run is not None]

    def _drop(self, index: int) -> None:
        run = self.runs[index]
        if run is not None:
            run.drop()
        self.runs[index] = None

    def drop(self) -> None:
        """Releases every capture and the static buffers."""
        for index in range(len(self.runs)):
            self._drop(index)
        self.buffers = []


def capture_set_problem(
    program: Program,
    capture_set: CaptureSet,
    config: Any,
    *,
    hook: Hook | None = None,
    after: Callable[[CapturedSet], str | None] | None = None,
) -> str | None:
    """Why ``program`` captured as ``capture_set`` does not replay as eager, or None;
    ``after(captured)`` may judge the set once it replayed, before it is dropped."""
    captured = CapturedSet(program, capture_set, config, hook=hook)
    try:
        return captured.replays() or (after(captured) if after is not None else None)
    finally:
        captured.drop()
