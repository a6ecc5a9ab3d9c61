"""Replay cost of the first breaks when the caller captures and replays on its own side stream.

The setup an independent benchmark used: one side stream ``s``; a body of 256
in-place launches ``x.mul_(1.0001)`` on 1024 floats, with k breaks ``y.add_(0.0)`` (through each
implementation's break) after op ``round((i + 1) * 256 / (k + 1))``; capture and replay inside
``with torch.cuda.stream(s):``, with a fresh capture (no pool given) per target, k and round.
Each timed replay is ``replay(); synchronize()``. The time k breaks add is the median of paired
differences: each target's k = 0 capture and its k capture replayed back to back, pair after
pair, the targets' order rotated each time, so drift moves both halves of a pair and every target
alike. Beside it are the CPU time of a replay's launches without a sync and the CPU time of each
``cudaGraphLaunch`` (graph segments replayed one by one, and on a GPU ``torch.profiler``'s
figure). Rounds interleave the targets in rotated and reversed orders, and every figure is kept
per round, so a machine-wide state that moves all launches shows as a spread over rounds (min,
median, max), not as one target's cost.

On the H200 a chain captured on a stream of its own replays every kernel about 0.18 us slower on
the caller's stream, and once a second such capture with a break is made, so does every graph of
the process (218 -> 264 us for a 256-kernel graph, clocks unchanged; DESIGN.md). The
minimal reference and ``breakable-cuda-graphs`` capture on their own streams; the library, on
``s``. So before the rounds every target captures and replays once with one break (``prime``),
and each round starts by timing a plain 256-kernel graph's GPU span (``state_gpu_s``): a state
change inside the run shows there.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

import breakable_cudagraph as bcg
from bench.micro import cut_points
from bench.minimal import MinimalCapture
from bench.targets import added_s

OPS, NUMEL, SCALE = 256, 1024, 1.0001
BREAKS = (0, 1, 4, 16, 255)


def add_zero(y: torch.Tensor) -> None:
    y.add_(0.0)


def body(x: torch.Tensor, y: torch.Tensor, cuts: set[int], brk: Callable[..., Any]) -> None:
    for i in range(1, OPS + 1):
        x.mul_(SCALE)
        if i in cuts:
            brk(y)


@dataclass
class Captured:
    """One target's capture: the replay, its steps in order (graph launches marked) and owners."""

    replay: Callable[[], Any]
    steps: list[tuple[Callable[[], Any], bool]]  # (step, is a graph launch)
    keep: list[Any] = field(default_factory=list)


def _library(x: torch.Tensor, y: torch.Tensor, cuts: set[int], **options: Any) -> Captured:
    brk = bcg.eager_break_during_capture(add_zero)
    cap = bcg.BreakableCUDAGraphCapture(**options)
    with cap:
        body(x, y, cuts, brk)
    steps = [(s.replay, isinstance(s, bcg.GraphSegment)) for s in cap.segments]
    return Captured(cap.replay, steps, [cap])


def _minimal(x: torch.Tensor, y: torch.Tensor, cuts: set[int]) -> Captured:
    cap = MinimalCapture()
    with cap:
        body(x, y, cuts, lambda t: cap.brk(add_zero, t))
    steps = [(s, hasattr(s, "__self__")) for s in cap.steps]
    return Captured(cap.replay, steps, [cap])


def _peer(x: torch.Tensor, y: torch.Tensor, cuts: set[int]) -> Captured:
    import breakable_cuda_graphs as bcgs

    brk = bcgs.no_graph(add_zero)
    graph = bcgs.BreakableCUDAGraph()
    with bcgs.breakable_graph(graph):
        body(x, y, cuts, brk)
    segments = list(graph._segments)
    steps = [(s.replay, isinstance(s, torch.cuda.CUDAGraph)) for s in segments]
    return Captured(graph.replay, steps, [graph])


BUILDERS: dict[str, Callable[..., Captured]] = {
    "minimal": _minimal,
    "peer": _peer,
    "library": _library,
}


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def measure(
    build: Callable[[], Captured], warmup: int, n: int, s: torch.cuda.Stream
) -> dict[str, Any]:
    """Capture on ``s`` and time replays there: capture, synced, launch-only, per graph launch."""
    with torch.cuda.stream(s):
        torch.cuda.synchronize()
        start = time.perf_counter()
        cap = build()
        torch.cuda.synchronize()
        capture_s = time.perf_counter() - start
        for _ in range(warmup):
            cap.replay()
            torch.cuda.synchronize()
        synced, launched = [], []
        for _ in range(n):
            torch.cuda.synchronize()
            start = time.perf_counter()
            cap.replay()
            mid = time.perf_counter()
            torch.cuda.synchronize()
            synced.append(time.perf_counter() - start)
            launched.append(mid - start)
        # The same launches one by one, timing each graph's launch call on its own.
        per_launch: list[float] = []
        for _ in range(max(1, n // 4)):
            torch.cuda.synchronize()
            for step, is_graph in cap.steps:
                start = time.perf_counter()
                step()
                if is_graph:
                    per_launch.append(time.perf_counter() - start)
        torch.cuda.synchronize()
    half = len(synced) // 2
    return {
        "capture_s": capture_s,
        "synced_s": _median(synced),
        "synced_first_half_s": _median(synced[:half]),
        "synced_second_half_s": _median(synced[half:]),
        "launch_cpu_s": _median(launched),
        "graph_launch_cpu_s": _median(per_launch),
        "graph_launches": sum(1 for _, g in cap.steps if g),
        "_captured": cap,
    }


def _capture(
    build: Callable[[], Captured], warmup: int, s: torch.cuda.Stream
) -> tuple[Captured, float]:
    """Capture on ``s`` (timed, synced before and after), then ``warmup`` synced replays."""
    with torch.cuda.stream(s):
        torch.cuda.synchronize()
        start = time.perf_counter()
        cap = build()
        torch.cuda.synchronize()
        capture_s = time.perf_counter() - start
        for _ in range(warmup):
            cap.replay()
            torch.cuda.synchronize()
    return cap, capture_s


def _cpu_figures(cap: Captured, n: int, s: torch.cuda.Stream) -> dict[str, Any]:
    """CPU time of a replay's launches without a sync, and of each graph launch on its own
    (the chain's steps called one by one, as its replay calls them)."""
    launched: list[float] = []
    per_launch: list[float] = []
    with torch.cuda.stream(s):
        for _ in range(max(1, n // 4)):
            torch.cuda.synchronize()
            start = time.perf_counter()
            cap.replay()
            launched.append(time.perf_counter() - start)
            torch.cuda.synchronize()
            for step, is_graph in cap.steps:
                start = time.perf_counter()
                step()
                if is_graph:
                    per_launch.append(time.perf_counter() - start)
        torch.cuda.synchronize()
    return {
        "launch_cpu_s": _median(launched),
        "graph_launch_cpu_s": _median(per_launch),
        "graph_launches": sum(1 for _, g in cap.steps if g),
    }


def _synced(replay: Callable[[], Any]) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    replay()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def _paired(
    bases: dict[str, Captured],
    caps: dict[str, Captured],
    order: tuple[str, ...],
    n: int,
    s: torch.cuda.Stream,
) -> dict[str, tuple[list[float], list[float]]]:
    """n pairs per target of synced replays, k = 0 capture and k capture back to back, the
    targets' order rotated and the pair's order swapped every time: a state that drifts during
    the run moves both halves of a pair and every target alike."""
    out: dict[str, tuple[list[float], list[float]]] = {t: ([], []) for t in order}
    with torch.cuda.stream(s):
        for i in range(n):
            for t in order[i % len(order) :] + order[: i % len(order)]:
                if i % 2:
                    broken = _synced(caps[t].replay)
                    base = _synced(bases[t].replay)
                else:
                    base = _synced(bases[t].replay)
                    broken = _synced(caps[t].replay)
                out[t][0].append(base)
                out[t][1].append(broken)
    return out


def profiled_launch_cpu(cap: Captured, s: torch.cuda.Stream, replays: int = 20) -> float:
    """Mean CPU time of one ``cudaGraphLaunch`` under ``torch.profiler`` (GPU only)."""
    from torch.profiler import ProfilerActivity, profile

    with torch.cuda.stream(s):
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(replays):
                cap.replay()
                torch.cuda.synchronize()
    launches = [e for e in prof.events() if e.name == "cudaGraphLaunch"]
    if not launches:
        return float("nan")
    return sum(e.cpu_time_total for e in launches) / len(launches) * 1e-6


def _release(cap: Captured) -> None:
    for obj in cap.keep:
        if hasattr(obj, "reset"):
            obj.reset()
    cap.keep.clear()


def _spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def summarize(rounds: list[dict[str, Any]], targets: tuple[str, ...]) -> dict[str, Any]:
    """Per target and k: min/median/max over rounds of each figure, and added time over k=0
    taken within each round (so a state shared by the round cancels)."""
    out: dict[str, Any] = {}
    ks = sorted({int(k) for r in rounds for k in r["k"]})
    for t in targets:
        per_k: dict[str, Any] = {}
        for k in ks:
            cells = [r["k"][str(k)][t] for r in rounds if t in r["k"].get(str(k), {})]
            if not cells:
                continue
            entry = {
                key: _spread([c[key] for c in cells])
                for key in ("synced_s", "launch_cpu_s", "graph_launch_cpu_s", "capture_s")
            }
            if k > 0:
                added = [added_s(r["k"], t, k) for r in rounds if t in r["k"].get(str(k), {})]
                if added:
                    entry["added_s"] = _spread(added)
                    entry["per_break_s"] = _spread([a / k for a in added])
            per_k[str(k)] = entry
        out[t] = per_k
    return out


def state_gpu_s(graph: torch.cuda.CUDAGraph, s: torch.cuda.Stream, reps: int = 10) -> float:
    """Median GPU span (CUDA events) of ``graph`` replayed on ``s``: the process state probe."""
    spans = []
    with torch.cuda.stream(s):
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            graph.replay()
            end.record()
            torch.cuda.synchronize()
            spans.append(start.elapsed_time(end) * 1e-3)
    return statistics.median(spans)


def run(
    device: str,
    breaks: tuple[int, ...] = BREAKS,
    rounds: int = 4,
    warmup: int = 20,
    n: int = 100,
    targets: tuple[str, ...] = ("minimal", "peer", "library"),
    profile_gpu: bool = False,
    builders: dict[str, Callable[..., Captured]] | None = None,
    prime: bool = True,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every target at every k in ``rounds`` interleaved rounds; see the module docstring."""
    builders = builders or BUILDERS
    s = torch.cuda.Stream()
    x0 = torch.randn(NUMEL, device=device)
    y = torch.randn(NUMEL, device=device)
    x = x0.clone()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # every kernel runs once eagerly before any capture
        body(x, y, cut_points(OPS + 1, 1), add_zero)
        expected = x0.clone()
        body(expected, y.clone(), set(), add_zero)
    torch.cuda.synchronize()
    # The state probe: a plain graph captured and replayed on s (such a capture does not move
    # the state), on its own tensor so the targets' x and y are untouched.
    probe_x = torch.randn(NUMEL, device=device)
    probe = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        probe.capture_begin()
        body(probe_x, y, set(), add_zero)
        probe.capture_end()
    torch.cuda.synchronize()
    unprimed = state_gpu_s(probe, s)
    if prime:
        for t in targets:
            x.copy_(x0)
            with torch.cuda.stream(s):
                cap = builders[t](x, y, cut_points(OPS, 1))
                cap.replay()
            torch.cuda.synchronize()
            _release(cap)
    primed = state_gpu_s(probe, s)
    log(
        f"state probe (plain 256-kernel graph, GPU span): {unprimed * 1e6:.1f}us before priming, "
        f"{primed * 1e6:.1f}us after"
    )
    per_round: list[dict[str, Any]] = []
    correct: dict[str, bool] = {t: True for t in targets}

    def check(t: str, cap: Captured) -> None:
        with torch.cuda.stream(s):  # one replay from x0 must give the eager result
            x.copy_(x0)
            cap.replay()
        torch.cuda.synchronize()
        correct[t] = correct[t] and bool(torch.allclose(x, expected, rtol=1e-5))

    for r in range(rounds):
        order = targets[r % len(targets) :] + targets[: r % len(targets)]
        if r % 2:
            order = order[::-1]
        round_state = state_gpu_s(probe, s)
        bases: dict[str, Captured] = {}
        cells: dict[str, dict[str, Any]] = {"0": {}}
        for t in order:
            x.copy_(x0)
            bases[t], capture_s = _capture(lambda t=t: builders[t](x, y, set()), warmup, s)
            cells["0"][t] = {"capture_s": capture_s, **_cpu_figures(bases[t], n, s)}
        base_synced: dict[str, list[float]] = {t: [] for t in targets}
        for k in breaks:
            if k == 0:
                continue
            cuts = cut_points(OPS, k)
            caps: dict[str, Captured] = {}
            cells[str(k)] = {}
            for t in order:
                x.copy_(x0)
                caps[t], capture_s = _capture(
                    lambda t=t, cuts=cuts: builders[t](x, y, cuts), warmup, s
                )
                cells[str(k)][t] = {"capture_s": capture_s}
            pairs = _paired(bases, caps, order, n, s)
            for t in order:
                base, broken = pairs[t]
                base_synced[t] += base
                cells[str(k)][t].update(
                    synced_s=_median(broken),
                    added_s=_median([b - a for a, b in zip(base, broken)]),
                    **_cpu_figures(caps[t], n, s),
                )
                check(t, caps[t])
                _release(caps[t])
        for t in order:
            if not base_synced[t]:  # k = 0 alone: time the bases by themselves
                base_synced[t] = _paired(bases, bases, order, n, s)[t][0]
            cells["0"][t]["synced_s"] = _median(base_synced[t])
            check(t, bases[t])
            _release(bases[t])
        for k in breaks:
            log(
                f"round {r} k={k}: "
                + ", ".join(
                    f"{t} {cells[str(k)][t]['synced_s'] * 1e6:.1f}us"
                    + (
                        f" (+{cells[str(k)][t]['added_s'] * 1e6:.1f})"
                        if "added_s" in cells[str(k)][t]
                        else ""
                    )
                    for t in targets
                )
            )
        per_round.append({"order": list(order), "state_gpu_s": round_state, "k": cells})
    profiled: dict[str, dict[str, float]] = {}
    if profile_gpu:  # after the timed rounds: the profiler's hooks must not move their figures
        for t in targets:
            profiled[t] = {}
            for k in breaks:
                if k > 16:  # thousands of profiled launches add time and tell nothing new
                    continue
                x.copy_(x0)
                with torch.cuda.stream(s):
                    cap = builders[t](x, y, cut_points(OPS, k) if k else set())
                profiled[t][str(k)] = profiled_launch_cpu(cap, s)
                _release(cap)
    torch.cuda.synchronize()
    probe.reset()
    return {
        "setup": {
            "ops": OPS,
            "numel": NUMEL,
            "warmup": warmup,
            "n": n,
            "rounds": rounds,
            "primed": prime,
        },
        "state_gpu_s": {"before_priming": unprimed, "after_priming": primed},
        "breaks": list(breaks),
        "targets": list(targets),
        "rounds": per_round,
        "summary": summarize(per_round, targets),
        "profiled_graph_launch_cpu_s": profiled,
        "correct": correct,
    }
