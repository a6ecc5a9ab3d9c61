"""The two runs bisect compares: the model eagerly, and the model captured then replayed.

Each run owns one instance of the user's model, built by ``FN()`` under the same seed, so that
a model with state (a cache, a step counter, a break that keeps a tensor) evolves in each run
as it would alone. :class:`EagerRun` warms up and runs ``forward()`` per step;
:class:`GraphRun` warms up, captures right after (under the target's caller duties, from a
stream of its own) and replays per step. Both run under a :class:`~verification.bisect.trace.Tracer`
and report their breaks, so each step yields a trace and copies of the outputs. An exception
while a run drives the model comes out as :class:`ModelRaised`, with the phase and what the
forward ran before it; whose it is (the model's, the target's or the harness's) is for the
caller to say.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from verification.bisect.model import UserModel, session
from verification.bisect.trace import Choose, Trace, Tracer, _none, copies
from verification.errors import UsageError
from verification.execute import collector_paused
from verification.targets import Target
from verification.targets.contracts import COLLECTOR, collector_frozen

SEED = 0


class ModelRaised(Exception):
    """``error`` was raised while a run drove the model in phase ``what`` (warm-up, capture,
    eager, replay or next_step); ``trace`` is what the forward ran up to it (None in
    next_step) and ``capture`` the capture's trace when it was raised at a replay."""

    def __init__(self, error: Exception, what: str, trace: Trace | None) -> None:
        super().__init__(f"{what}: {type(error).__name__}: {error}")
        self.error, self.what, self.trace = error, what, trace
        self.capture: Trace | None = None


class _Run:
    def __init__(
        self,
        model: UserModel,
        internal: tuple[str, ...],
        detail: Choose = _none,
        force: Choose = _none,
        decorate: Callable[[Any], Any] | None = None,
    ) -> None:
        self.stream = torch.cuda.Stream()
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            self.forward, self.next_step = model.build(SEED)
        self.tracer = Tracer(internal, detail=detail, force=force, decorate=decorate)

    def _traced(
        self,
        keep: bool,
        what: str,
        body: Callable[[], Any],
        kept: Callable[[Any], Any] = copies,
    ) -> tuple[Trace, Any]:
        """Runs ``body`` (phase ``what``) traced on this run's stream; returns the trace and
        ``kept(result)`` (copied on the same stream, so that the copies are ordered after the
        writes)."""
        with torch.cuda.stream(self.stream), session(self.tracer) as reporting:
            reporting.keep = keep
            trace = self.tracer.start(record_forced=keep)
            try:
                with self.tracer:
                    out = body()
                out = kept(out) if keep else out
                torch.cuda.synchronize()
            except UsageError:
                raise
            except Exception as error:
                raise ModelRaised(error, what, trace) from error
        return trace, out

    def prepare(self, step: int) -> None:
        # Both runs must see the same inputs: a next_step drawing random values draws them
        # from the same seed in each.
        torch.manual_seed(SEED + 1 + step)
        try:
            with torch.cuda.stream(self.stream):
                self.next_step(step)
        except UsageError:
            raise
        except Exception as error:
            raise ModelRaised(error, "next_step", None) from error


class EagerRun(_Run):
    """The reference: ``forward()`` eagerly, traced."""

    def step(self, step: int | None, keep: bool = True) -> tuple[Trace, list[torch.Tensor]]:
        """Runs step ``step`` (None: the warm-up, on the inputs FN built)."""
        if step is not None:
            self.prepare(step)
        trace, out = self._traced(keep, "warm-up" if step is None else "eager", self.forward)
        return trace, out if keep else []


class GraphRun(_Run):
    """Captured right after a warm-up, under ``target``, then replayed per step."""

    def __init__(
        self,
        model: UserModel,
        internal: tuple[str, ...],
        target: Target,
        detail: Choose = _none,
        force: Choose = _none,
    ) -> None:
        super().__init__(
            model, internal, detail=detail, force=force, decorate=target.eager_break_during_capture
        )
        self.warmup_trace, self.warmup_outputs = self._traced(True, "warm-up", self.forward)
        duties = (
            collector_frozen() if COLLECTOR in target.caller_duties else contextlib.nullcontext()
        )
        self.capture = target.BreakableCUDAGraphCapture()

        self.tracer.forced_ptrs.clear()  # what forced ops saw at the warm-up is not the capture's

        def captured() -> Any:
            with collector_paused(), duties, self.capture:
                return self.forward()

        self.capture_trace, self.outputs = self._traced(False, "capture", captured)
        self.last_trace: Trace | None = None

    def step(self, step: int, keep: bool = True) -> tuple[Trace, list[torch.Tensor]]:
        self.prepare(step)
        try:
            trace, out = self._traced(
                keep, "replay", self.capture.replay, lambda _: copies(self.outputs)
            )
        except ModelRaised as raised:
            raised.capture = self.capture_trace
            raise
        self.last_trace = trace
        return trace, out if keep else []
