"""Replay and capture cost of k eager breaks in a body of one-kernel ops, for every target.

A body of ``ops`` one-kernel ops (``x = x.mul(c)``, each in a fresh pool tensor) has ``k`` breaks
spread evenly between them, each a one-kernel eager op (``x.mul_(c)``). Each target (eager, one
``torch.cuda.graph``, this library, ``breakable-cuda-graphs``, ``bench.minimal``) captures that
program once per k; replays are timed in interleaved rounds whose target order rotates, so none
profits from going first. ``floor_s`` is one graph launch plus one eager call, measured in the
same run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

import breakable_cudagraph as bcg
from bench.minimal import MinimalCapture

SCALE = 1.0001
BREAK_SCALE = 0.9999


def cut_points(ops: int, breaks: int) -> set[int]:
    """After which op counts the ``breaks`` eager steps go: evenly spread, never first or last."""
    cuts = {round((j + 1) * ops / (breaks + 1)) for j in range(breaks)}
    if len(cuts) != breaks or not cuts <= set(range(1, ops)):
        raise ValueError(f"{breaks} breaks do not fit between {ops} ops")
    return cuts


def eager_op(x: torch.Tensor) -> None:
    x.mul_(BREAK_SCALE)


def program(x0: torch.Tensor, ops: int, cuts: set[int], brk: Callable[..., None]) -> torch.Tensor:
    x = x0
    for i in range(1, ops + 1):
        x = x.mul(SCALE)
        if i in cuts:
            brk(x)
    return x


@dataclass
class Built:
    """A captured (or eager) program: how to replay it and where its output and memory are."""

    replay: Callable[[], Any]
    output: Callable[[], torch.Tensor]
    pool: Any = None
    keep: list[Any] = field(default_factory=list)  # objects whose life is the build's


def _eager(x0: torch.Tensor, ops: int, cuts: set[int]) -> Built:
    box: list[torch.Tensor] = [program(x0, ops, cuts, eager_op)]

    def replay() -> None:
        box[0] = program(x0, ops, cuts, eager_op)

    return Built(replay, lambda: box[0])


def _torch_graph(x0: torch.Tensor, ops: int, cuts: set[int]) -> Built:
    # The ideal: the break ops are capturable here, so everything is one graph.
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = program(x0, ops, cuts, eager_op)
    return Built(graph.replay, lambda: out, graph.pool(), [graph])


def _library(x0: torch.Tensor, ops: int, cuts: set[int]) -> Built:
    brk = bcg.eager_break_during_capture(eager_op)
    capture = bcg.BreakableCUDAGraphCapture()
    with capture:
        out = program(x0, ops, cuts, brk)
    return Built(capture.replay, lambda: out, capture.pool, [capture])


def _minimal(x0: torch.Tensor, ops: int, cuts: set[int]) -> Built:
    capture = MinimalCapture()
    with capture:
        out = program(x0, ops, cuts, lambda x: capture.brk(eager_op, x))
    return Built(capture.replay, lambda: out, capture.pool, [capture])


def _peer(x0: torch.Tensor, ops: int, cuts: set[int]) -> Built:
    import breakable_cuda_graphs as bcgs

    brk = bcgs.no_graph(eager_op)
    graph = bcgs.BreakableCUDAGraph()
    with bcgs.breakable_graph(graph):
        out = program(x0, ops, cuts, brk)
    return Built(graph.replay, lambda: out, graph.pool(), [graph])


def have_peer() -> bool:
    try:
        import breakable_cuda_graphs  # noqa: F401
    except ImportError:
        return False
    return True


TARGETS: dict[str, Callable[[torch.Tensor, int, set[int]], Built]] = {
    "eager": _eager,
    "torch_graph": _torch_graph,
    "library": _library,
    "minimal": _minimal,
    "peer": _peer,
}


def pool_bytes(pool: Any) -> int:
    """Bytes the caching allocator holds in segments of one graph pool."""
    if pool is None:
        return 0
    wanted = tuple(pool)
    return sum(
        s["total_size"]
        for s in torch.cuda.memory_snapshot()
        if tuple(s.get("segment_pool_id") or ()) == wanted
    )


def _timed_build(build: Callable[[], Built]) -> tuple[Built, float]:
    torch.cuda.synchronize()
    start = time.perf_counter()
    built = build()
    torch.cuda.synchronize()
    return built, time.perf_counter() - start


def _warm_up(x0: torch.Tensor, ops: int, cuts: set[int]) -> None:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        program(x0, ops, cuts, eager_op)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()


def _sample(replay: Callable[[], Any], n: int) -> tuple[list[float], list[float], float]:
    """n single replays (launch-only CPU time, synced time) and one burst of n (per replay)."""
    cpu, synced = [], []
    for _ in range(n):
        torch.cuda.synchronize()
        start = time.perf_counter()
        replay()
        launched = time.perf_counter()
        torch.cuda.synchronize()
        done = time.perf_counter()
        cpu.append(launched - start)
        synced.append(done - start)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        replay()
    torch.cuda.synchronize()
    return cpu, synced, (time.perf_counter() - start) / n


def measure_floor(device: str, rounds: int, n: int, launches: int = 256) -> dict[str, float]:
    """One graph launch plus one eager call: ``launches`` (one-kernel graph, eager op) pairs
    against one graph of ``launches`` kernels, synced, median over repeats."""
    y = torch.ones(4096, device=device)
    z = torch.ones(4096, device=device)
    for _ in range(2):
        y.mul_(SCALE)
        eager_op(z)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    one, many = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        one.capture_begin()
        y.mul_(SCALE)
        one.capture_end()
        many.capture_begin(pool=one.pool())
        for _ in range(launches):
            y.mul_(SCALE)
        many.capture_end()
    torch.cuda.current_stream().wait_stream(stream)

    def pairs() -> None:
        for _ in range(launches):
            one.replay()
            eager_op(z)

    pair_s, graph_s = [], []
    for _ in range(rounds):
        pair_s += _sample(pairs, n)[1]
        graph_s += _sample(many.replay, n)[1]
    pair, graph = statistics.median(pair_s), statistics.median(graph_s)
    return {"floor_s": (pair - graph) / launches, "pairs_s": pair, "graph_s": graph}


def run(
    device: str,
    breaks: tuple[int, ...],
    ops: int,
    numel: int,
    rounds: int,
    n: int,
    targets: tuple[str, ...],
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every target at every k: capture time, pool bytes, replay times, correctness."""
    x0 = torch.randn(numel, device=device)
    rows = []
    for k in breaks:
        cuts = cut_points(ops, k)
        _warm_up(x0, ops, cuts)
        expected = program(x0, ops, cuts, eager_op)
        built: dict[str, Built] = {}
        row: dict[str, Any] = {"breaks": k}
        for name in targets:
            torch.cuda.empty_cache()
            built[name], row[f"{name}_capture_s"] = _timed_build(
                lambda name=name, cuts=cuts: TARGETS[name](x0, ops, cuts)
            )
            row[f"{name}_pool_bytes"] = pool_bytes(built[name].pool)
        samples: dict[str, tuple[list[float], list[float], list[float]]] = {
            name: ([], [], []) for name in targets
        }
        for r in range(rounds):
            order = targets[r % len(targets) :] + targets[: r % len(targets)]
            for name in order:
                cpu, synced, burst = _sample(built[name].replay, n)
                samples[name][0].extend(cpu)
                samples[name][1].extend(synced)
                samples[name][2].append(burst)
        for name in targets:
            cpu, synced, burst = samples[name]
            row[f"{name}_cpu_s"] = statistics.median(cpu)
            row[f"{name}_synced_s"] = statistics.median(synced)
            row[f"{name}_burst_s"] = statistics.median(burst)
            row[f"{name}_correct"] = bool(
                torch.allclose(built[name].output(), expected, rtol=1e-4, atol=1e-5)
            )
        log(f"k={k}: " + ", ".join(f"{t} {row[f'{t}_synced_s'] * 1e6:.1f}us" for t in targets))
        rows.append(row)
        for b in built.values():
            for obj in b.keep:
                if hasattr(obj, "reset"):
                    obj.reset()
        del built
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return {"ops": ops, "numel": numel, "rounds": rounds, "n": n, "rows": rows}
