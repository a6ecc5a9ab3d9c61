"""GPU probe (issue 23): why the library's first break cost about 48 us on a side stream.

Runs ``bench.side_stream``'s setup for the library, ``bench.minimal`` and
``breakable-cuda-graphs`` and for variants that each change one thing (the capture stream, the
capture mode, a memory snapshot at the break, the collector, graph upload), times a plain
one-graph reference after every capture to catch process-wide state, and dumps each capture's
graph nodes. Writes one JSON file per part under ``--out``. ``python -m bench.probes.first_break``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

import breakable_cudagraph as bcg
from bench import side_stream
from bench.minimal import MinimalCapture
from bench.side_stream import Captured, add_zero, body

_SHARED: list[torch.cuda.Stream] = []


def _cudart() -> ctypes.CDLL | None:
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "libcudart.so" in line:
                return ctypes.CDLL(line.split()[-1])
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        with contextlib.suppress(OSError):
            return ctypes.CDLL(name)
    return None


CUDART: ctypes.CDLL | None = None


def _graphs(cap: Captured) -> list[torch.cuda.CUDAGraph]:
    out = []
    for step, is_graph in cap.steps:
        if is_graph:
            owner = getattr(step, "__self__", None)
            if isinstance(owner, bcg.GraphSegment):
                owner = owner.graph
            out.append(owner)
    return out


def _upload(cap: Captured) -> Captured:
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    rcs = [
        CUDART.cudaGraphUpload(ctypes.c_void_p(g.raw_cuda_graph_exec()), stream)
        for g in _graphs(cap)
    ]
    assert all(rc == 0 for rc in rcs), rcs
    return cap


@contextlib.contextmanager
def _patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def _lib(**options: Any) -> Callable[..., Captured]:
    return lambda x, y, cuts: side_stream._library(x, y, cuts, **options)


def _lib_shared_stream(x, y, cuts) -> Captured:
    if not _SHARED:
        _SHARED.append(torch.cuda.Stream())
    return side_stream._library(x, y, cuts, stream=_SHARED[0])


def _lib_caller_stream(x, y, cuts) -> Captured:
    return side_stream._library(x, y, cuts, stream=torch.cuda.current_stream())


def _lib_no_snapshot(x, y, cuts) -> Captured:
    from breakable_cudagraph import arguments

    def no_refresh(self) -> None:
        self._ranges = []

    with _patched(arguments.PoolMemory, "_refresh", no_refresh):
        return side_stream._library(x, y, cuts)


def _lib_gc_on(x, y, cuts) -> Captured:
    from breakable_cudagraph import collector

    with _patched(collector, "pause", lambda: None), _patched(collector, "resume", lambda: None):
        return side_stream._library(x, y, cuts)


def _lib_uploaded(x, y, cuts) -> Captured:
    return _upload(side_stream._library(x, y, cuts))


def _min_upload(x, y, cuts) -> Captured:
    return _upload(side_stream._minimal(x, y, cuts))


def _min_snapshot(x, y, cuts) -> Captured:
    cap = MinimalCapture()

    def brk(t: torch.Tensor) -> None:
        torch.cuda.memory_snapshot()
        cap.brk(add_zero, t)

    with cap:
        body(x, y, cuts, brk)
    return Captured(cap.replay, [(s, hasattr(s, "__self__")) for s in cap.steps], [cap])


class _ThreadLocalMinimal(MinimalCapture):
    def _begin(self) -> None:
        self._graph = torch.cuda.CUDAGraph()
        self._graph.capture_begin(pool=self.pool, capture_error_mode="thread_local")


def _min_thread_local(x, y, cuts) -> Captured:
    cap = _ThreadLocalMinimal()
    with cap:
        body(x, y, cuts, lambda t: cap.brk(add_zero, t))
    return Captured(cap.replay, [(s, hasattr(s, "__self__")) for s in cap.steps], [cap])


def _min_gc_off(x, y, cuts) -> Captured:
    gc.disable()
    try:
        return side_stream._minimal(x, y, cuts)
    finally:
        gc.enable()


VARIANTS: dict[str, Callable[..., Captured]] = {
    "minimal": side_stream._minimal,
    "peer": side_stream._peer,
    "library": side_stream._library,
    "lib_caller_stream": _lib_caller_stream,
    "lib_shared_stream": _lib_shared_stream,
    "lib_global": _lib(capture_error_mode="global"),
    "lib_no_snapshot": _lib_no_snapshot,
    "lib_gc_on": _lib_gc_on,
    "lib_uploaded": _lib_uploaded,
    "min_uploaded": _min_upload,
    "min_snapshot": _min_snapshot,
    "min_thread_local": _min_thread_local,
    "min_gc_off": _min_gc_off,
}


def _node_dump(cap_builder: Callable[..., Captured], x, y, cuts) -> list[dict[str, Any]]:
    """Node types, roots and edges of every graph a capture makes (captured with keep_graph)."""
    made: list[torch.cuda.CUDAGraph] = []
    real = torch.cuda.CUDAGraph

    def factory(*args: Any, **kwargs: Any) -> torch.cuda.CUDAGraph:
        graph = real(keep_graph=True)
        made.append(graph)
        return graph

    torch.cuda.CUDAGraph = factory  # type: ignore[misc]
    try:
        cap = cap_builder(x, y, cuts)
    finally:
        torch.cuda.CUDAGraph = real  # type: ignore[misc]
    out = []
    for graph in made:
        try:
            raw = ctypes.c_void_p(graph.raw_cuda_graph())
        except RuntimeError as error:
            out.append({"error": str(error)[:100]})
            continue
        count = ctypes.c_size_t(0)
        CUDART.cudaGraphGetNodes(raw, None, ctypes.byref(count))
        nodes = (ctypes.c_void_p * max(1, count.value))()
        CUDART.cudaGraphGetNodes(raw, nodes, ctypes.byref(count))
        types: dict[int, int] = {}
        for node in list(nodes)[: count.value]:
            kind = ctypes.c_int(0)
            CUDART.cudaGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(kind))
            types[kind.value] = types.get(kind.value, 0) + 1
        roots = ctypes.c_size_t(0)
        CUDART.cudaGraphGetRootNodes(raw, None, ctypes.byref(roots))
        edges = ctypes.c_size_t(0)
        CUDART.cudaGraphGetEdges(raw, None, None, ctypes.byref(edges))
        out.append(
            {"nodes": count.value, "types": types, "roots": roots.value, "edges": edges.value}
        )
    side_stream._release(cap)
    return out


def main(argv: list[str] | None = None) -> int:
    global CUDART
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--variants", nargs="*", default=list(VARIANTS))
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    CUDART = _cudart()
    s = torch.cuda.Stream()
    x0 = torch.randn(side_stream.NUMEL, device="cuda")
    y = torch.randn(side_stream.NUMEL, device="cuda")
    x = x0.clone()
    with torch.cuda.stream(s):
        body(x, y, {128}, add_zero)
    torch.cuda.synchronize()
    # A plain one-graph reference, timed after every capture: process-wide state shows here.
    ref = torch.cuda.CUDAGraph()
    z = torch.randn(side_stream.NUMEL, device="cuda")
    with torch.cuda.stream(s):
        ref.capture_begin()
        for _ in range(side_stream.OPS):
            z.mul_(side_stream.SCALE)
        ref.capture_end()
    torch.cuda.synchronize()

    def ref_time() -> tuple[float, float]:
        synced, launched = [], []
        with torch.cuda.stream(s):
            for _ in range(60):
                torch.cuda.synchronize()
                a = time.perf_counter()
                ref.replay()
                b = time.perf_counter()
                torch.cuda.synchronize()
                synced.append(time.perf_counter() - a)
                launched.append(b - a)
        return statistics.median(synced[10:]), statistics.median(launched[10:])

    print("ref before:", [round(v * 1e6, 1) for v in ref_time()], flush=True)
    builders = {v: VARIANTS[v] for v in args.variants if v != "lib_uploaded" or CUDART}
    names = tuple(builders)
    rows = []
    for r in range(args.rounds):
        order = names if r % 2 == 0 else names[::-1]
        for k in (0, 1, 4):
            cuts = side_stream.cut_points(side_stream.OPS, k) if k else set()
            for name in order:
                x.copy_(x0)
                try:
                    m = side_stream.measure(
                        lambda name=name, cuts=cuts: builders[name](x, y, cuts), 20, 200, s
                    )
                except Exception as error:  # a probe reports every outcome
                    print(f"{name} k={k}: {error!r}", flush=True)
                    continue
                cap = m.pop("_captured")
                steps_cpu = []
                with torch.cuda.stream(s):
                    for _ in range(30):
                        torch.cuda.synchronize()
                        one = []
                        for step, _g in cap.steps:
                            a = time.perf_counter()
                            step()
                            one.append(time.perf_counter() - a)
                        steps_cpu.append(one)
                    torch.cuda.synchronize()
                m["steps_cpu_us"] = [
                    round(statistics.median(col) * 1e6, 2) for col in zip(*steps_cpu)
                ][:9]
                side_stream._release(cap)
                gc_on = gc.isenabled()
                ref_synced, ref_launch = ref_time()
                row = {"round": r, "k": k, "variant": name, **m, "gc_enabled_after": gc_on}
                row["ref_synced_s"], row["ref_launch_s"] = ref_synced, ref_launch
                rows.append(row)
                print(
                    f"[{r}] k={k} {name:18s} synced {m['synced_s'] * 1e6:7.1f} "
                    f"(1st {m['synced_first_half_s'] * 1e6:6.1f} 2nd "
                    f"{m['synced_second_half_s'] * 1e6:6.1f}) launch {m['launch_cpu_s'] * 1e6:6.1f} "
                    f"per-graph {m['graph_launch_cpu_s'] * 1e6:5.1f} steps {m['steps_cpu_us']} "
                    f"ref {ref_synced * 1e6:6.1f}/{ref_launch * 1e6:5.1f}",
                    flush=True,
                )
    (args.out / "variants.json").write_text(json.dumps(rows, indent=1))
    if CUDART is not None:
        dumps = {}
        for name in ("minimal", "peer", "library"):
            x.copy_(x0)
            with torch.cuda.stream(s):
                try:
                    dumps[name] = _node_dump(VARIANTS[name], x, y, {128})
                except Exception as error:
                    dumps[name] = repr(error)
            torch.cuda.synchronize()
        print("nodes:", json.dumps(dumps), flush=True)
        (args.out / "nodes.json").write_text(json.dumps(dumps, indent=1))
    print("ref after:", [round(v * 1e6, 1) for v in ref_time()], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
