"""Host-side Python cost of capturing k eager breaks: this library against ``bench.minimal``, on CPU.

On a GPU, capture time is mostly per-segment work both implementations pay equally (a new
``CUDAGraph``, ``capture_begin``, ``capture_end``); what differs is each one's Python per break.
This isolates that difference on a machine without a GPU: ``torch.cuda``'s graph, stream and
allocator calls are replaced by stand-ins that do nothing (the same stand-ins for both
implementations), the program is ``bench.micro``'s on CPU tensors, and the allocator's snapshot
reports every address as pool memory, as the benchmark's break arguments are on the GPU.
Captures alternate between the two implementations over ``--rounds`` rounds, timed in this
thread's CPU time (``time.thread_time``) so that other processes on a shared machine inflate
neither side; the report is the median capture time, and per break
``(capture(k) - capture(0)) / k`` of each and their difference.

Usage: ``python -m bench.capture_overhead_cpu [--breaks 0 64 256] [--rounds 15] [--profile]
[--baseline DIR]``; ``--baseline`` times a second copy of the package (another commit's) in
the same rounds, which is how before/after is compared on a noisy machine. A second measure
times a tight loop of breaks with no ops between them: the per-break cost alone. A third runs
the breaks of an engine's sweep (``bench.capture_sweep``'s arguments, on CPU stand-ins): what
holding arguments in and out of the pool costs per break.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import importlib.util
import io
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

import torch

import breakable_cudagraph
from bench import micro
from bench.minimal import MinimalCapture


class _FakeGraph:
    """``torch.cuda.CUDAGraph`` with no device behind it: every call returns at once."""

    def __init__(self, keep_graph: bool = False) -> None:
        self._pool: tuple[int, int] | None = None

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        self._pool = pool

    def capture_end(self) -> None:
        pass

    def replay(self) -> None:
        pass

    def reset(self) -> None:
        pass

    def pool(self) -> Any:
        return self._pool


class _FakeStream:
    def wait_stream(self, other: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass


class _FakeStreamContext:
    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def __enter__(self) -> Any:
        return self.stream

    def __exit__(self, *exc: object) -> None:
        pass


_CALLER_STREAM = _FakeStream()
_POOLS: list[tuple[int, int]] = []


def _pool_handle() -> tuple[int, int]:
    _POOLS.append((0, len(_POOLS) + 1))
    return _POOLS[-1]


def _memory_snapshot(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
    # Every pool spans the whole address space: on the GPU the benchmark's break arguments
    # are fresh pool tensors, so the library aliases each of them; here it does the same.
    return [{"address": 0, "total_size": 1 << 64, "segment_pool_id": p} for p in _POOLS]


@contextlib.contextmanager
def fake_cuda() -> Iterator[None]:
    """``torch.cuda``'s graph, stream and allocator entry points as do-nothing stand-ins."""
    stand_ins: dict[str, Any] = {
        "CUDAGraph": _FakeGraph,
        "Stream": _FakeStream,
        "stream": _FakeStreamContext,
        "current_stream": lambda *a, **k: _CALLER_STREAM,
        "default_stream": lambda *a, **k: _CALLER_STREAM,  # the caller is on it: a side stream
        "graph_pool_handle": _pool_handle,
        "memory_snapshot": _memory_snapshot,
        "is_current_stream_capturing": lambda: False,
        "synchronize": lambda *a, **k: None,
        "empty_cache": lambda: None,
    }
    with contextlib.ExitStack() as stack:
        for name, value in stand_ins.items():
            stack.enter_context(mock.patch.object(torch.cuda, name, value))
        stack.enter_context(mock.patch.dict(os.environ, {"BREAKABLE_CUDAGRAPH_DISABLE": "0"}))
        yield


Build = Callable[[torch.Tensor, int, set[int]], micro.Built]


def library_target(lib: ModuleType) -> Build:
    """``bench.micro``'s library target, for any copy of the library (the baseline's too)."""

    def build(x0: torch.Tensor, ops: int, cuts: set[int]) -> micro.Built:
        brk = lib.eager_break_during_capture(micro.eager_op)
        capture = lib.BreakableCUDAGraphCapture()
        with capture:
            out = micro.program(x0, ops, cuts, brk)
        return micro.Built(capture.replay, lambda: out, capture.pool, [capture])

    return build


def library_loop(lib: ModuleType) -> Callable[[torch.Tensor, int], float]:
    """Seconds of thread CPU time that ``n`` back-to-back breaks on one pool tensor take."""

    def loop(x: torch.Tensor, n: int) -> float:
        brk = lib.eager_break_during_capture(micro.eager_op)
        with lib.BreakableCUDAGraphCapture():
            y = x.mul(micro.SCALE)  # a capture intermediate, as the program's break arguments
            start = time.thread_time()
            for _ in range(n):
                brk(y)
            return time.thread_time() - start

    return loop


def minimal_loop(x: torch.Tensor, n: int) -> float:
    capture = MinimalCapture()
    with capture:
        y = x.mul(micro.SCALE)
        start = time.thread_time()
        for _ in range(n):
            capture.brk(micro.eager_op, y)
        return time.thread_time() - start


def measure_loops(
    n: int, numel: int, rounds: int, loops: dict[str, Callable[[torch.Tensor, int], float]]
) -> dict[str, float]:
    """Median seconds per break of each implementation's tight loop of ``n`` breaks: no ops
    between breaks, so the number is the break's own cost (segment calls included)."""
    x = torch.randn(numel)
    names = list(loops)
    samples: dict[str, list[float]] = {name: [] for name in names}
    with fake_cuda():
        for name in names:
            loops[name](x, n)
        for r in range(rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                gc.collect()
                samples[name].append(loops[name](x, n) / n)
    return {name: statistics.median(values) for name, values in samples.items()}


SWEEP_SIZES = (1, 2, 4, *range(8, 513, 8))
SWEEP_LAYERS, HEADS, HEAD_DIM = 8, 8, 16


class _SweepStandIn:
    """The break arguments of ``bench.capture_sweep``'s 8-layer sweep of 67 sizes, on CPU: per
    layer q, k and v split from one projection and an output, at the places an allocator
    reuses in a pool (an arena the allocator's snapshot reports as the pool), the batch's
    positions (a slice of a buffer outside the pool, one per size, passed to every layer) and
    the layer's key and value caches (outside the pool). Each implementation runs the sweep's
    captures and breaks and nothing else: the difference is what each pays per break for
    holding its arguments."""

    def __init__(self) -> None:
        width = 3 * HEADS * HEAD_DIM
        self.arena = torch.empty(2 * max(SWEEP_SIZES) * width, dtype=torch.bfloat16)
        self.positions = torch.zeros(max(SWEEP_SIZES), dtype=torch.long)
        cache = (max(SWEEP_SIZES), 4, HEADS, HEAD_DIM)
        self.caches = [
            (torch.zeros(cache, dtype=torch.bfloat16), torch.zeros(cache, dtype=torch.bfloat16))
            for _ in range(SWEEP_LAYERS)
        ]

    def snapshot(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        return [
            {
                "address": self.arena.data_ptr(),
                "total_size": self.arena.untyped_storage().nbytes(),
                "segment_pool_id": pool,
            }
            for pool in _POOLS
        ]

    def arguments(self, size: int, layer: int, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        width = 3 * HEADS * HEAD_DIM
        start = (layer % 2) * size * width  # two places, as a pool's allocator alternates
        qkv = self.arena[start : start + size * width].view(size, 3, HEADS, HEAD_DIM)
        q, k, v = qkv.unbind(1)
        end = self.arena.numel() - size * HEADS * HEAD_DIM
        out = self.arena[end:].view(size, HEADS, HEAD_DIM)
        return q, k, v, positions, *self.caches[layer], out


def _attention_stand_in(*args: torch.Tensor) -> None:
    pass


def library_sweep(lib: ModuleType) -> Callable[[_SweepStandIn], float]:
    """Thread CPU seconds of one sweep by ``lib``'s captures sharing one record of the pool,
    with the collector paused for the sweep, as ``CaptureSet`` does."""

    def sweep(stand_in: _SweepStandIn) -> float:
        brk = lib.eager_break_during_capture(_attention_stand_in)
        pool = torch.cuda.graph_pool_handle()
        record = lib.arguments.PoolMemory(pool, sweep=True)
        start = time.thread_time()
        lib.collector.pause()
        try:
            for size in reversed(SWEEP_SIZES):
                capture = lib.BreakableCUDAGraphCapture(pool=pool)
                capture._pool_memory = record
                positions = stand_in.positions[:size]  # the batch's slice, as a call's input
                with capture:
                    for layer in range(SWEEP_LAYERS):
                        brk(*stand_in.arguments(size, layer, positions))
        finally:
            lib.collector.resume()
        record.forget_held()
        return time.thread_time() - start

    return sweep


def minimal_sweep(stand_in: _SweepStandIn) -> float:
    """The same sweep by ``bench.minimal``, the collector off for it (as ``bench.capture_sweep``
    runs it)."""
    pool = torch.cuda.graph_pool_handle()
    start = time.thread_time()
    gc.disable()
    try:
        for size in reversed(SWEEP_SIZES):
            capture = MinimalCapture(pool)
            positions = stand_in.positions[:size]
            with capture:
                for layer in range(SWEEP_LAYERS):
                    capture.brk(_attention_stand_in, *stand_in.arguments(size, layer, positions))
    finally:
        gc.enable()
    return time.thread_time() - start


def measure_sweep(
    rounds: int, sweeps: dict[str, Callable[[_SweepStandIn], float]]
) -> dict[str, float]:
    """Median seconds per break of each implementation's sweep, over interleaved rounds."""
    stand_in = _SweepStandIn()
    names = list(sweeps)
    samples: dict[str, list[float]] = {name: [] for name in names}
    breaks = len(SWEEP_SIZES) * SWEEP_LAYERS
    with fake_cuda(), mock.patch.object(torch.cuda, "memory_snapshot", stand_in.snapshot):
        for name in names:
            sweeps[name](stand_in)
        for r in range(rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                gc.collect()
                samples[name].append(sweeps[name](stand_in) / breaks)
    return {name: statistics.median(values) for name, values in samples.items()}


IMPLEMENTATIONS: dict[str, Build] = {
    "library": library_target(breakable_cudagraph),
    "minimal": micro.TARGETS["minimal"],
}


def load_baseline(root: Path) -> ModuleType:
    """The package in ``root`` (a copy of ``breakable_cudagraph``, say from an older commit)
    imported as ``breakable_cudagraph_baseline``, beside the working tree's."""
    name = "breakable_cudagraph_baseline"
    spec = importlib.util.spec_from_file_location(
        name, root / "__init__.py", submodule_search_locations=[str(root)]
    )
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"no package at {root}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _timed(build: Build, x0: torch.Tensor, ops: int, cuts: set[int]) -> float:
    gc.collect()
    start = time.thread_time()
    built = build(x0, ops, cuts)
    elapsed = time.thread_time() - start
    expected = micro.program(x0, ops, cuts, micro.eager_op)
    if not torch.allclose(built.output(), expected):
        raise AssertionError("a capture computed a different result from eager")
    return elapsed


def measure(
    breaks: list[int], ops: int, numel: int, rounds: int, impls: dict[str, Build]
) -> dict[str, Any]:
    """Median capture CPU seconds per implementation and k, over interleaved rounds whose
    implementation order rotates, so that none profits from going first."""
    torch.manual_seed(0)
    x0 = torch.randn(numel)
    names = list(impls)
    samples: dict[tuple[str, int], list[float]] = {}
    with fake_cuda():
        for name in names:  # warm-up: imports, first-call caches
            _timed(impls[name], x0, ops, micro.cut_points(ops, max(breaks)))
        for r in range(rounds):
            for k in breaks:
                cuts = micro.cut_points(ops, k) if k else set()
                shift = (r + k) % len(names)
                for name in names[shift:] + names[:shift]:
                    samples.setdefault((name, k), []).append(_timed(impls[name], x0, ops, cuts))
    median = {key: statistics.median(values) for key, values in samples.items()}
    rows = []
    for k in breaks:
        row: dict[str, Any] = {"breaks": k}
        for name in names:
            row[f"{name}_capture_s"] = median[(name, k)]
            if k:
                row[f"{name}_per_break_s"] = (median[(name, k)] - median[(name, 0)]) / k
        rows.append(row)
    return {"ops": ops, "numel": numel, "rounds": rounds, "names": names, "rows": rows}


def profile_library(k: int, ops: int, numel: int, top: int = 25) -> str:
    """cProfile of the library capturing ``k`` breaks, ten times; the top functions by own time."""
    x0 = torch.randn(numel)
    cuts = micro.cut_points(ops, k)
    profiler = cProfile.Profile()
    with fake_cuda():
        IMPLEMENTATIONS["library"](x0, ops, cuts)
        profiler.enable()
        for _ in range(10):
            IMPLEMENTATIONS["library"](x0, ops, cuts)
        profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def format_rows(result: dict[str, Any]) -> str:
    """One markdown table: capture (ms) and per break (us) of each implementation, and each
    one's ratio to minimal and extra per break over minimal."""
    others = [n for n in result["names"] if n != "minimal"]
    head = ["k"]
    for name in result["names"]:
        head += [f"{name} capture (ms)", f"{name} per break (us)"]
    for name in others:
        head += [f"{name} / minimal", f"{name} - minimal per break (us)"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in result["rows"]:
        cells = [str(r["breaks"])]
        for name in result["names"]:
            per = r.get(f"{name}_per_break_s")
            cells += [
                f"{r[f'{name}_capture_s'] * 1e3:.3f}",
                "-" if per is None else f"{per * 1e6:.2f}",
            ]
        for name in others:
            ratio = r[f"{name}_capture_s"] / r["minimal_capture_s"]
            extra = r.get(f"{name}_per_break_s")
            extra = None if extra is None else extra - r["minimal_per_break_s"]
            cells += [f"{ratio:.3f}", "-" if extra is None else f"{extra * 1e6:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.capture_overhead_cpu")
    parser.add_argument("--breaks", type=int, nargs="+", default=[0, 64, 256])
    parser.add_argument("--ops", type=int, default=257)
    parser.add_argument("--numel", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a copy of the breakable_cudagraph package (e.g. from `git archive`) to time as "
        "'baseline' in the same rounds",
    )
    parser.add_argument("--profile", action="store_true", help="also cProfile the library")
    args = parser.parse_args(argv)
    if 0 not in args.breaks or max(args.breaks) >= args.ops or min(args.breaks) < 0:
        parser.error("--breaks must include 0 and lie below --ops")
    torch.set_num_threads(1)
    impls = dict(IMPLEMENTATIONS)
    loops = {"library": library_loop(breakable_cudagraph), "minimal": minimal_loop}
    sweeps = {"library": library_sweep(breakable_cudagraph), "minimal": minimal_sweep}
    if args.baseline is not None:
        baseline = load_baseline(args.baseline)
        impls["baseline"] = library_target(baseline)
        loops["baseline"] = library_loop(baseline)
        sweeps["baseline"] = library_sweep(baseline)
    result = measure(sorted(set(args.breaks)), args.ops, args.numel, args.rounds, impls)
    print(
        f"ops {args.ops}, numel {args.numel}, {args.rounds} interleaved rounds, "
        "medians of thread CPU time"
    )
    print(format_rows(result))
    per_break = measure_loops(max(args.breaks), args.numel, args.rounds, loops)
    print(
        f"\nTight loop of {max(args.breaks)} breaks on one tensor, median per break: "
        + ", ".join(
            f"{name} {seconds * 1e6:.2f} us"
            + ("" if name == "minimal" else f" (+{(seconds - per_break['minimal']) * 1e6:.2f})")
            for name, seconds in per_break.items()
        )
    )
    per_sweep_break = measure_sweep(args.rounds, sweeps)
    print(
        f"\nAn engine's sweep ({len(SWEEP_SIZES)} sizes x {SWEEP_LAYERS} layers, 7 arguments a "
        "break, 4 of them in the pool), median per break: "
        + ", ".join(
            f"{name} {seconds * 1e6:.2f} us"
            + (
                ""
                if name == "minimal"
                else f" (+{(seconds - per_sweep_break['minimal']) * 1e6:.2f})"
            )
            for name, seconds in per_sweep_break.items()
        )
    )
    if args.profile:
        print(profile_library(max(args.breaks), args.ops, args.numel))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
