"""Diagnoses where a breakable replay spends time: per step, per variant, under the profiler.

For k breaks in the micro benchmark's body it times, for the library and for ``bench.minimal``
and for variants of each (replay on the capture stream, graphs uploaded before the first launch,
capture mode, synchronize before capture), the CPU time of every step of a replay, the
launch-only and synced replay, counts the nodes of each captured graph by type, and prints
``torch.profiler``'s CPU table of one replay. GPU only: ``python -m bench.replay_probe``.
"""

from __future__ import annotations

import contextlib
import ctypes
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from bench.micro import cut_points, eager_op, program
from bench.minimal import MinimalCapture

OPS, NUMEL, REPS = 257, 4096, 60


def _cudart() -> ctypes.CDLL | None:
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "libcudart.so" in line:
                return ctypes.CDLL(line.split()[-1])
    return None


CUDART: ctypes.CDLL | None = None


def node_types(graph: torch.cuda.CUDAGraph) -> dict[int, int]:
    """Node type -> count for a graph captured with keep_graph=True."""
    raw = ctypes.c_void_p(graph.raw_cuda_graph())
    count = ctypes.c_size_t(0)
    assert CUDART.cudaGraphGetNodes(raw, None, ctypes.byref(count)) == 0
    nodes = (ctypes.c_void_p * count.value)()
    assert CUDART.cudaGraphGetNodes(raw, nodes, ctypes.byref(count)) == 0
    types: dict[int, int] = {}
    for node in nodes:
        kind = ctypes.c_int(0)
        CUDART.cudaGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(kind))
        types[kind.value] = types.get(kind.value, 0) + 1
    return types


def upload(graph: torch.cuda.CUDAGraph) -> int:
    exec_ = ctypes.c_void_p(graph.raw_cuda_graph_exec())
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    return CUDART.cudaGraphUpload(exec_, stream)


@contextlib.contextmanager
def keep_graphs() -> Iterator[list[torch.cuda.CUDAGraph]]:
    """Every CUDAGraph made inside is made with keep_graph=True and collected."""
    made: list[torch.cuda.CUDAGraph] = []
    real = torch.cuda.CUDAGraph

    def factory(*args: Any, **kwargs: Any) -> torch.cuda.CUDAGraph:
        graph = real(keep_graph=True)
        made.append(graph)
        return graph

    torch.cuda.CUDAGraph = factory  # type: ignore[misc]
    try:
        yield made
    finally:
        torch.cuda.CUDAGraph = real  # type: ignore[misc]


class _ThreadLocalMinimal(MinimalCapture):
    def _begin(self) -> None:
        self._graph = torch.cuda.CUDAGraph()
        self._graph.capture_begin(pool=self.pool, capture_error_mode="thread_local")


def build(variant: str, x0: torch.Tensor, cuts: set[int]) -> tuple[list[Callable], Any, list]:
    """(steps of one replay, context to replay in, graphs) for a variant."""
    import breakable_cudagraph as bcg

    graphs: list[torch.cuda.CUDAGraph] = []
    ctx: Any = contextlib.nullcontext
    if variant.startswith("library"):
        brk = bcg.eager_break_during_capture(eager_op)
        cap = bcg.BreakableCUDAGraphCapture()
        with cap:
            program(x0, OPS, cuts, brk)
        steps = [s.replay for s in cap.segments]
        graphs = [s.graph for s in cap.segments if hasattr(s, "graph")]
        if variant == "library_on_capture_stream":
            ctx = lambda: torch.cuda.stream(cap.stream)  # noqa: E731
        keep = cap
    else:
        if variant == "minimal_sync_first":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        cls = _ThreadLocalMinimal if variant == "minimal_thread_local" else MinimalCapture
        cap = cls()
        with cap:
            program(x0, OPS, cuts, lambda x: cap.brk(eager_op, x))
        steps = cap.steps
        graphs = [s.__self__ for s in steps if hasattr(s, "__self__")]
        keep = cap
    if variant.endswith("_uploaded"):
        print(f"  upload rc: {[upload(g) for g in graphs]}")
    torch.cuda.synchronize()
    return steps, ctx, [keep, graphs]


def time_steps(steps: list[Callable], ctx: Any) -> dict[str, Any]:
    per_step: list[list[float]] = [[] for _ in steps]
    cpu, synced = [], []
    with ctx():
        for _ in range(REPS):
            torch.cuda.synchronize()
            start = time.perf_counter()
            for i, step in enumerate(steps):
                t = time.perf_counter()
                step()
                per_step[i].append(time.perf_counter() - t)
            launched = time.perf_counter()
            torch.cuda.synchronize()
            cpu.append(launched - start)
            synced.append(time.perf_counter() - start)
    return {
        "cpu_us": statistics.median(cpu) * 1e6,
        "synced_us": statistics.median(synced) * 1e6,
        "steps_us": [round(statistics.median(s) * 1e6, 1) for s in per_step[:8]],
    }


def profile_table(steps: list[Callable], ctx: Any) -> str:
    from torch.profiler import ProfilerActivity, profile

    with ctx(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            for step in steps:
                step()
            torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12)


VARIANTS = (
    "minimal",
    "library",
    "library_on_capture_stream",
    "library_uploaded",
    "minimal_uploaded",
    "minimal_thread_local",
    "minimal_sync_first",
)


def main() -> int:
    global CUDART
    x0 = torch.randn(NUMEL, device="cuda")
    for _ in range(3):
        program(x0, OPS, cut_points(OPS, 2), eager_op)
    torch.cuda.synchronize()
    CUDART = _cudart()
    print(f"cudart: {CUDART}")
    for k in (1, 2, 4, 16):
        cuts = cut_points(OPS, k)
        print(f"== k={k}")
        for rnd in range(2):
            for variant in VARIANTS:
                if "uploaded" in variant and CUDART is None:
                    continue
                steps, ctx, keep = build(variant, x0, cuts)
                result = time_steps(steps, ctx)
                print(f"  [{rnd}] {variant:28s} {result}")
                del keep
                torch.cuda.synchronize()
    if CUDART is not None:
        cuts = cut_points(OPS, 2)
        for variant in ("minimal", "library"):
            with keep_graphs() as made:
                steps, _, keep = build(variant, x0, cuts)
            print(f"== nodes {variant}: {[node_types(g) for g in made]}")
            del keep
    for variant in ("minimal", "library"):
        steps, ctx, keep = build(variant, x0, cut_points(OPS, 1))
        print(f"== profile {variant}, k=1")
        print(profile_table(steps, ctx))
        del keep
    return 0


if __name__ == "__main__":
    sys.exit(main())
