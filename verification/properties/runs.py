"""Runs a generated program under a target the way every property needs it.

:class:`ProgramRun` allocates static inputs, warms up eagerly and captures once from a
side stream of the harness (optionally into a given pool, with extra capture keywords, with
a hook called before each step inside the capture, and with break functions wrapped);
:meth:`ProgramRun.replay_problem` replays on fresh inputs and compares with eager.
Memory helpers read reserved memory, and graph-pool memory, the same way on GPU and simulator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from verification.execute import (
    BreakLog,
    collector_paused,
    run_eager,
    run_steps,
    seed_rng,
    step_callables,
)
from verification.ops.spec import OpSpec
from verification.oracle import compare, program_tolerance
from verification.programs import Program, make_inputs, op_table
from verification.targets import Target

Hook = Callable[[int, dict[int, torch.Tensor]], None]
Wrap = Callable[[Callable[..., Any]], Callable[..., Any]]
DEFAULT_POOL = (0, 0)


class ProgramRun:
    """``program`` captured once by ``target`` on static inputs, ready to replay."""

    def __init__(
        self,
        program: Program,
        target: Target,
        kind: str,
        device: str,
        seed: int,
        *,
        pool: Any = None,
        capture_kwargs: Mapping[str, Any] | None = None,
        hook: Hook | None = None,
        wrap: Wrap | None = None,
        ops: Sequence[OpSpec] | None = None,
        reseed: bool = True,
        inputs: Sequence[torch.Tensor] | None = None,
    ) -> None:
        self.program = program
        self.table = op_table(ops)
        self.kind = kind
        self.device = device
        self.seed = seed
        # Seeding touches the process's generators, which another thread's capture forbids.
        self._seed = (lambda s: seed_rng(s, kind)) if reseed else (lambda s: None)
        self.log = BreakLog()
        wrap = wrap or (lambda fn: fn)
        decorate = target.eager_break_during_capture
        self.callables = step_callables(
            program, self.table, lambda fn: decorate(wrap(fn)), self.log
        )
        # ``inputs``: made by the caller beforehand (a thread check makes them before its threads
        # start: on the H200 a copy to the device in one thread while another ended its
        # capture crashed torch by SIGSEGV).
        made = make_inputs(program, seed, device) if inputs is None else inputs
        self.static_inputs = [x.clone() for x in made]
        kwargs = dict(capture_kwargs or {})
        if pool is not None:
            kwargs["pool"] = pool
        self.capture: Any = None
        self.outputs: list[torch.Tensor] = []
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        try:
            with torch.cuda.stream(side):
                self._seed(seed)
                run_steps(program, self.table, self.callables, self.static_inputs)
                self.log.take()
                self.capture = target.BreakableCUDAGraphCapture(**kwargs)
                self._seed(seed)
                with collector_paused(), self.capture:
                    self.outputs = run_steps(
                        program, self.table, self.callables, self.static_inputs, hook
                    )
        finally:
            torch.cuda.current_stream().wait_stream(side)
        self.capture_log = self.log.take()

    def replay_problem(self, replay_seed: int) -> str | None:
        """Replays on the inputs of ``replay_seed``; why it differs from eager, or None."""
        fresh = make_inputs(self.program, replay_seed, self.device)
        expected = run_eager(self.program, self.table, fresh, replay_seed, self.kind)
        for static, value in zip(self.static_inputs, fresh):
            static.copy_(value)
        self.log.take()  # calls of an earlier replay that raised midway
        self._seed(replay_seed)
        self.capture.replay()
        torch.cuda.synchronize()
        calls = [step for step, _ in self.log.take()]
        breaks = [i for i, s in enumerate(self.program.steps) if s.brk]
        if calls != breaks:
            return f"replay called break steps {calls}, expected {breaks}"
        tol = program_tolerance(self.program, self.table)
        for index, (actual, want) in enumerate(zip(self.outputs, expected)):
            problem = compare(actual, want, tol)
            if problem is not None:
                return f"output {index}: {problem}"
        return None

    def drop(self) -> None:
        """Releases the capture (``reset()`` where the target has it) and every tensor."""
        reset = getattr(self.capture, "reset", None)
        if callable(reset):
            reset()
        self.capture = None
        self.outputs = []
        self.static_inputs = []
        self.callables = []


def settle(kind: str) -> None:
    """Frees what can be freed: collect, synchronize, empty the allocator's cache."""
    import gc

    gc.collect()
    torch.cuda.synchronize()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if kind == "cuda" and clear is not None:
        clear()  # cuBLAS keeps a workspace per stream in the caching allocator
    torch.cuda.empty_cache()


def reserved() -> int:
    return int(torch.cuda.memory_reserved())


def graph_pool_bytes() -> int:
    """Bytes reserved in graph pools (every pool but the default one)."""
    return sum(
        int(segment["total_size"])
        for segment in torch.cuda.memory_snapshot()
        if tuple(segment.get("segment_pool_id") or DEFAULT_POOL) != DEFAULT_POOL
    )


def in_graph_pool(tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s memory lies in a graph pool (it was made inside a capture)."""
    address = tensor.untyped_storage().data_ptr()
    return any(
        segment["address"] <= address < segment["address"] + segment["total_size"]
        for segment in torch.cuda.memory_snapshot()
        if tuple(segment.get("segment_pool_id") or DEFAULT_POOL) != DEFAULT_POOL
    )
