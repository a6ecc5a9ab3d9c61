"""GPU probe (issue 23): does the number of CUDA graphs a process holds move every launch?

Calls 1 and 2 of 2026-12-03 found a process-wide switch: after the first capture with a break
(any implementation's), a plain 256-kernel graph replays about 45 us slower, for good. A
capture without a break never moved it, and a capture with one break makes two graphs. So:
is it the count of graphs instantiated in the process? Each variant runs in a fresh child:
a reference graph is timed (GPU span by CUDA events, median of 15 windows of 10 replays),
then after each extra graph captured (``plain``: back to back; ``eager_between``: an eager
kernel on the capture stream before each, as a break makes; ``one_capture_two_graphs``: two
graphs per step, captured one right after the other as a break's segments are), then after
the extras are reset and collected. One JSON line per variant.
Run on a GPU machine: ``python -m bench.probes.graph_count_state``.
"""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
import sys

import torch

VARIANTS = ("plain", "eager_between", "one_capture_two_graphs")
KERNELS = 256
EXTRAS = 6


def span_us(graph: torch.cuda.CUDAGraph, stream: torch.cuda.Stream) -> float:
    windows = []
    with torch.cuda.stream(stream):
        for _ in range(15):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(10):
                graph.replay()
            end.record()
            end.synchronize()
            windows.append(start.elapsed_time(end) * 1000 / 10)
    return round(statistics.median(windows), 1)


def capture_graph(
    stream: torch.cuda.Stream, x: torch.Tensor, kernels: int, pool: object = None
) -> torch.cuda.CUDAGraph:
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        g.capture_begin(pool=pool)
        for _ in range(kernels):
            x.mul_(1.0001)
        g.capture_end()
    return g


def run(variant: str) -> dict[str, object]:
    s = torch.cuda.Stream()
    x = torch.randn(1024, device="cuda")
    y = torch.randn(1024, device="cuda")
    s.wait_stream(torch.cuda.current_stream())
    torch.cuda.synchronize()
    reference = capture_graph(s, x, KERNELS)
    for _ in range(20):
        reference.replay()
    torch.cuda.synchronize()
    spans = {"graphs_1": span_us(reference, s)}
    extras: list[torch.cuda.CUDAGraph] = []
    for _ in range(EXTRAS):
        if variant == "eager_between":
            with torch.cuda.stream(s):
                y.add_(0.0)
        extras.append(capture_graph(s, y, 4))
        if variant == "one_capture_two_graphs":
            with torch.cuda.stream(s):
                y.add_(0.0)
            extras.append(capture_graph(s, y, 4))
        torch.cuda.synchronize()
        spans[f"graphs_{1 + len(extras)}"] = span_us(reference, s)
    for g in extras:
        g.reset()
    extras.clear()
    gc.collect()
    torch.cuda.synchronize()
    spans["after_reset"] = span_us(reference, s)
    return {"variant": variant, "reference_span_us": spans}


def print_each_in_fresh_child(module: str, args: list[str]) -> None:
    """Runs ``python -m module arg`` for each arg, one fresh process after another (a process
    state is what these probes look at), and prints each child's last line of output."""
    for arg in args:
        done = subprocess.run(
            [sys.executable, "-m", module, arg], capture_output=True, text=True, timeout=120
        )
        line = done.stdout.strip().splitlines()[-1:] or [done.stderr[-300:]]
        print(line[0], flush=True)


def main() -> None:
    if len(sys.argv) > 1:
        print(json.dumps(run(sys.argv[1])))
        return
    print_each_in_fresh_child(
        "bench.probes.graph_count_state", [v for v in VARIANTS for _ in range(2)]
    )


if __name__ == "__main__":
    main()
