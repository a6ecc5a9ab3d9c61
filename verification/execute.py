"""Runs a program two ways: eagerly (the reference) and captured by a target then replayed.

Every break call, in either mode, goes through a :class:`BreakLog` wrapper applied before
the target's decorator, so the oracle can see which breaks ran, in what order and on which
buffers. :class:`CapturedProgram` allocates static inputs, warms up eagerly and captures
once, all from a side stream of its own, and replays on demand.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from verification.ops.spec import Decorate, OpSpec
from verification.programs import Program, produces_value
from verification.targets import Target

BreakEntry = tuple[int, tuple[int, ...]]


def _identity(fn: Callable[..., Any]) -> Callable[..., Any]:
    return fn


def _tensor_ptrs(args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[int, ...]:
    leaves, _ = tree_flatten((args, kwargs))
    return tuple(v.data_ptr() for v in leaves if isinstance(v, torch.Tensor))


class BreakLog:
    """Records ``(step index, tensor argument data_ptrs)`` once per break step call.

    Calls nested inside a logged call (a break calling another decorated function) are not
    recorded: accounting is per program step.
    """

    def __init__(self) -> None:
        self.entries: list[BreakEntry] = []
        self._depth = 0

    def wrap(self, step: int, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def logged(*args: Any, **kwargs: Any) -> Any:
            if self._depth == 0:
                self.entries.append((step, _tensor_ptrs(args, kwargs)))
            self._depth += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1

        return logged

    def take(self) -> list[BreakEntry]:
        entries, self.entries = self.entries, []
        return entries


def step_callables(
    program: Program, table: Mapping[str, OpSpec], decorate: Decorate, log: BreakLog
) -> list[Callable[..., Any]]:
    """The callable of each step; break steps are logged, then decorated with ``decorate``."""

    def decorate_step(index: int) -> Decorate:
        return lambda fn: decorate(log.wrap(index, fn))

    callables = []
    for index, step in enumerate(program.steps):
        spec = table[step.op]
        if spec.kind == "break":
            callables.append(spec.callable_for(decorate_step(index)))
        elif step.brk:
            callables.append(decorate_step(index)(spec.callable_for(_identity)))
        else:
            callables.append(spec.callable_for(_identity))
    return callables


def run_steps(
    program: Program,
    table: Mapping[str, OpSpec],
    callables: Sequence[Callable[..., Any]],
    inputs: Sequence[torch.Tensor],
    hook: Callable[[int, dict[int, torch.Tensor]], None] | None = None,
) -> list[torch.Tensor]:
    """Runs the steps on ``inputs`` and returns the output values, dropping dead values.

    ``hook(step index, live values)``, if given, is called before each step and once more
    (index ``len(steps)``) after the last (the property checks inject faults and sleeps there).
    """
    env: dict[int, torch.Tensor] = dict(enumerate(inputs))
    next_value = len(inputs)
    for index, (step, fn) in enumerate(zip(program.steps, callables)):
        if hook is not None:
            hook(index, env)
        result = fn(*(env[a] for a in step.args), **step.kwargs)
        if produces_value(table[step.op]):
            env[next_value] = result
            next_value += 1
        for value in step.drop:
            del env[value]
    if hook is not None:
        hook(len(program.steps), env)
    return [env[v] for v in program.outputs]


def seed_rng(seed: int, device: str) -> None:
    # Not torch.manual_seed: it also seeds every lazily-initialised backend (xpu, mps), and
    # each of those records a stack trace per call, a third of a simulated example's time.
    torch.default_generator.manual_seed(seed)
    # The simulator keeps a device generator apart from the host's, as CUDA does (its
    # patched torch.cuda.manual_seed seeds it): seeding only the host one there lets eager
    # and replay draw different numbers.
    if device in ("cuda", "sim"):
        torch.cuda.manual_seed(seed)


def run_eager(
    program: Program,
    table: Mapping[str, OpSpec],
    inputs: Sequence[torch.Tensor],
    rng_seed: int,
    device: str,
    log: BreakLog | None = None,
) -> list[torch.Tensor]:
    """The reference: every step eagerly, breaks through the identity decorator."""
    callables = step_callables(program, table, _identity, log or BreakLog())
    seed_rng(rng_seed, device)
    return run_steps(program, table, callables, [x.clone() for x in inputs])


_collector_lock = threading.Lock()
_collector_pauses = 0
_collector_was_enabled = True


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Keeps Python's cyclic collector from running while the harness captures.

    The collector frees graphs that earlier examples left in reference cycles, and freeing a
    captured graph while a capture is open breaks that capture on a GPU
    (``bench/probes/reset_during_capture.py``): a failure of no target's making, seen as a
    false ``nested`` finding under ``pytest -n auto`` on the H200. Counted, so that captures
    in several threads (the ``threads`` property) re-enable it only when the last one ends.
    The library has its own copy (``breakable_cudagraph.collector``): the harness must not
    run on code it may be judging, and ``mutate`` swaps that package for mutants.
    """
    global _collector_pauses, _collector_was_enabled
    with _collector_lock:
        if _collector_pauses == 0:
            _collector_was_enabled = gc.isenabled()
            gc.disable()
        _collector_pauses += 1
    try:
        yield
    finally:
        with _collector_lock:
            _collector_pauses -= 1
            if _collector_pauses == 0 and _collector_was_enabled:
                gc.enable()


class CapturedProgram:
    """A program captured once by ``target`` on static inputs, ready to replay."""

    def __init__(
        self,
        program: Program,
        table: Mapping[str, OpSpec],
        target: Target,
        inputs: Sequence[torch.Tensor],
        rng_seed: int,
        device: str,
    ) -> None:
        self.log = BreakLog()
        self.device = device
        self.static_inputs = [x.clone() for x in inputs]
        callables = step_callables(program, table, target.eager_break_during_capture, self.log)
        # Capture from a stream of the harness's own, as real users do, so that a target
        # expecting its caller to pick the stream is exercised correctly.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            seed_rng(rng_seed, device)
            run_steps(program, table, callables, self.static_inputs)
            self.log.take()
            self.capture = target.BreakableCUDAGraphCapture()
            seed_rng(rng_seed, device)
            with collector_paused(), self.capture:
                self.outputs = run_steps(program, table, callables, self.static_inputs)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        self.capture_log = self.log.take()

    def replay(self, inputs: Sequence[torch.Tensor], rng_seed: int) -> list[BreakEntry]:
        """Copies ``inputs`` into the static inputs, replays, and returns the break log."""
        for static, value in zip(self.static_inputs, inputs):
            static.copy_(value)
        seed_rng(rng_seed, self.device)
        self.capture.replay()
        torch.cuda.synchronize()
        return self.log.take()
