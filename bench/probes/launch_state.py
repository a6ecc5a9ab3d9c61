"""GPU probe (issue 23): what moves a whole process between a fast and a slow replay state.

``--part state``: times one plain 256-kernel graph on a side stream in windows of 5 synced
replays, recording beside each window the GPU span (CUDA events), the CPU launch time and the
SM and memory clocks (NVML), first undisturbed and then after each trigger (an idle gap, a busy
second, ``empty_cache``, ``gc.collect``, ``memory_snapshot``, a capture of each implementation).
``--part issue``: the issue's protocol in this process, implementations in the given order, each
at k = 0, 1, 4, 16, 255 (fresh capture, 20 warm-ups, 200 synced replays). JSON under ``--out``.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bench import side_stream
from bench.side_stream import add_zero, body, cut_points

try:
    import pynvml

    pynvml.nvmlInit()
    _NVML = pynvml.nvmlDeviceGetHandleByIndex(0)
except Exception:  # no NVML: clocks are left out
    _NVML = None


def clocks() -> dict[str, Any]:
    if _NVML is None:
        return {}
    out: dict[str, Any] = {
        "sm_mhz": pynvml.nvmlDeviceGetClockInfo(_NVML, pynvml.NVML_CLOCK_SM),
        "mem_mhz": pynvml.nvmlDeviceGetClockInfo(_NVML, pynvml.NVML_CLOCK_MEM),
    }
    for name in (
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
    ):
        if hasattr(pynvml, name):
            try:
                out["reasons"] = hex(getattr(pynvml, name)(_NVML))
            except Exception as error:
                out["reasons"] = repr(error)[:60]
            break
    try:
        out["pstate"] = pynvml.nvmlDeviceGetPerformanceState(_NVML)
        out["power_mw"] = pynvml.nvmlDeviceGetPowerUsage(_NVML)
    except Exception:
        pass
    return out


def window(replay: Callable[[], Any], s: torch.cuda.Stream, reps: int = 5) -> dict[str, Any]:
    synced, launch, gpu = [], [], []
    with torch.cuda.stream(s):
        for _ in range(reps):
            a_ev, b_ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            a = time.perf_counter()
            a_ev.record()
            replay()
            b_ev.record()
            b = time.perf_counter()
            torch.cuda.synchronize()
            synced.append(time.perf_counter() - a)
            launch.append(b - a)
            gpu.append(a_ev.elapsed_time(b_ev) * 1e-3)
    return {
        "synced_us": round(statistics.median(synced) * 1e6, 1),
        "launch_us": round(statistics.median(launch) * 1e6, 1),
        "gpu_us": round(statistics.median(gpu) * 1e6, 1),
    }


def part_state(out: Path, order: str) -> None:
    s = torch.cuda.Stream()
    x = torch.randn(side_stream.NUMEL, device="cuda")
    y = torch.randn(side_stream.NUMEL, device="cuda")
    z = torch.randn(side_stream.NUMEL, device="cuda")
    with torch.cuda.stream(s):
        body(x, y, {128}, add_zero)
    torch.cuda.synchronize()
    ref = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        ref.capture_begin()
        for _ in range(side_stream.OPS):
            z.mul_(side_stream.SCALE)
        ref.capture_end()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    log: list[dict[str, Any]] = []
    kept: list[Any] = []

    def record(phase: str, count: int) -> None:
        for i in range(count):
            w = window(ref.replay, s)
            if i % 5 == 0 or i == count - 1:
                w.update(clocks())
            log.append({"phase": phase, "t": round(time.perf_counter() - t0, 4), **w})

    def capture(name: str, k: int) -> Callable[[], None]:
        def go() -> None:
            with torch.cuda.stream(s):
                cap = side_stream.BUILDERS[name](
                    x, y, cut_points(side_stream.OPS, k) if k else set()
                )
            torch.cuda.synchronize()
            kept.append(cap)

        return go

    def busy() -> None:
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        end = time.perf_counter() + 1.0
        while time.perf_counter() < end:
            for _ in range(20):
                a @ a
            torch.cuda.synchronize()

    triggers: dict[str, Callable[[], Any]] = {
        "idle_0.005s": lambda: time.sleep(0.005),
        "idle_0.05s": lambda: time.sleep(0.05),
        "memory_snapshot": torch.cuda.memory_snapshot,
        "library_k1": capture("library", 1),
        "minimal_k1": capture("minimal", 1),
        "idle_0.5s": lambda: time.sleep(0.5),
        "gc_collect": gc.collect,
        "empty_cache": torch.cuda.empty_cache,
        "peer_k1": capture("peer", 1),
        "busy_1s": busy,
        "idle_3s": lambda: time.sleep(3.0),
    }
    names = list(triggers) if order == "fwd" else list(triggers)[::-1]
    record("start", 150)
    for name in names:
        a = time.perf_counter()
        triggers[name]()
        took = time.perf_counter() - a
        log.append({"phase": name, "trigger_s": round(took, 4), **clocks()})
        record("after " + name, 40)
    (out / f"state_{order}.json").write_text(json.dumps(log, indent=0))
    # A compact table: each phase's first, middle and last windows.
    phases: dict[str, list[dict[str, Any]]] = {}
    for entry in log:
        if "synced_us" in entry:
            phases.setdefault(entry["phase"], []).append(entry)
    for phase, entries in phases.items():
        picks = [entries[0], entries[len(entries) // 2], entries[-1]]
        sm = [e.get("sm_mhz") for e in entries if "sm_mhz" in e]
        print(
            f"{order} {phase:22s} synced {[e['synced_us'] for e in picks]} gpu "
            f"{[e['gpu_us'] for e in picks]} launch {[e['launch_us'] for e in picks]} "
            f"sm {sm[:3]}..{sm[-1:]} pstate {entries[-1].get('pstate')} "
            f"reasons {entries[-1].get('reasons')}",
            flush=True,
        )
    for entry in log:
        if "trigger_s" in entry:
            print(
                f"{order} trigger {entry['phase']}: {entry['trigger_s'] * 1e3:.2f} ms", flush=True
            )


def part_issue(out: Path, order: str) -> None:
    names = ("minimal", "peer", "library")
    if order == "rev":
        names = names[::-1]
    s = torch.cuda.Stream()
    x0 = torch.randn(side_stream.NUMEL, device="cuda")
    y = torch.randn(side_stream.NUMEL, device="cuda")
    x = x0.clone()
    with torch.cuda.stream(s):
        body(x, y, {128}, add_zero)
    torch.cuda.synchronize()
    rows = []
    for name in names:
        for k in (0, 1, 4, 16, 255):
            cuts = cut_points(side_stream.OPS, k) if k else set()
            x.copy_(x0)
            before = clocks()
            m = side_stream.measure(
                lambda name=name, cuts=cuts: side_stream.BUILDERS[name](x, y, cuts), 20, 200, s
            )
            cap = m.pop("_captured")
            gw = window(cap.replay, s, 20)
            side_stream._release(cap)
            rows.append(
                {
                    "target": name,
                    "k": k,
                    **m,
                    "gpu_us": gw["gpu_us"],
                    "clocks_before": before,
                    "clocks_after": clocks(),
                }
            )
    base = {r["target"]: r["synced_s"] for r in rows if r["k"] == 0}
    for r in rows:
        r["added_us"] = round((r["synced_s"] - base[r["target"]]) * 1e6, 1)
        print(
            f"issue {order} {r['target']:8s} k={r['k']:3d} synced {r['synced_s'] * 1e6:7.1f} "
            f"added {r['added_us']:7.1f} gpu {r['gpu_us']:7.1f} launch {r['launch_cpu_s'] * 1e6:6.1f} "
            f"per-graph {r['graph_launch_cpu_s'] * 1e6:5.1f} sm {r['clocks_before'].get('sm_mhz')}"
            f"->{r['clocks_after'].get('sm_mhz')}",
            flush=True,
        )
    (out / f"issue_{order}.json").write_text(json.dumps(rows, indent=0))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--part", choices=("state", "issue"), required=True)
    p.add_argument("--order", choices=("fwd", "rev"), default="fwd")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    (part_state if args.part == "state" else part_issue)(args.out, args.order)
    return 0


if __name__ == "__main__":
    sys.exit(main())
