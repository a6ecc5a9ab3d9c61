"""GPU probe (issue 23): what makes a capture with a break slow every kernel of its replay.

Earlier probes saw a whole process switch to graphs running about 0.18 us per kernel slower "at
its first capture with a break", but timed every variant after that switch, so none could tell
what fires it. Here each candidate runs in a fresh child: a reference graph's GPU span (CUDA
events, median of 15 windows of 10 replays on side stream ``s``) is taken before the candidate,
after it, and after a control (default: the library's capture at k = 1), so a child whose state
never moves says so. The candidates take a break's capture apart: a kernel on a stream that has
run none yet, a wait only, two graphs sharing a pool, an eager kernel between two captures on
``s`` or on a new stream, the minimal reference, the library on its own stream and on the
caller's (``library_k1`` is the library as it is: since call J it captures on the caller's
stream), a plain ``torch.cuda.graph`` capture, a ``cudaFree``; ``candidate@control`` names
another control. ``issue_*`` candidates time the issue's k = 1 row instead (the named capture
first in a fresh process: its k = 0, then its k = 1, 200 synced replays each). One JSON line per
child. Run on a GPU: ``python -m bench.probes.state_trigger --all [ROUNDS [follow-ups]]``.
Findings: ``results/gpu/2026-12-03c.md`` and DESIGN.md.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable

import torch

from bench.probes.graph_count_state import capture_graph, print_each_in_fresh_child, span_us

KERNELS = 256


def _add_zero(y: torch.Tensor) -> None:
    y.add_(0.0)


def _library_k1(x: torch.Tensor, y: torch.Tensor, s: torch.cuda.Stream, **options):
    import breakable_cudagraph as bcg

    brk = bcg.eager_break_during_capture(_add_zero)
    with torch.cuda.stream(s):
        cap = bcg.BreakableCUDAGraphCapture(**options)
        with cap:
            for i in range(1, KERNELS + 1):
                x.mul_(1.0001)
                if i == 128:
                    brk(y)
    torch.cuda.synchronize()
    return cap


def candidates(x: torch.Tensor, y: torch.Tensor, s: torch.cuda.Stream) -> dict[str, Callable]:
    kept: list[object] = []

    def kernel_new_stream() -> None:
        t = torch.cuda.Stream()
        t.wait_stream(s)
        with torch.cuda.stream(t):
            y.add_(0.0)
        torch.cuda.synchronize()

    def wait_new_stream() -> None:
        t = torch.cuda.Stream()
        t.wait_stream(s)
        torch.cuda.synchronize()

    def graph_on_new_stream() -> None:
        g = capture_graph(s, y, 4)
        t = torch.cuda.Stream()
        t.wait_stream(s)
        with torch.cuda.stream(t):
            g.replay()
        torch.cuda.synchronize()
        kept.append(g)

    def raw_break(on_new_stream: bool, shared_pool: bool, eager: bool) -> Callable[[], None]:
        def go() -> None:
            t = torch.cuda.Stream() if on_new_stream else s
            t.wait_stream(s)
            pool = torch.cuda.graph_pool_handle() if shared_pool else None
            g1 = capture_graph(t, x, 128, pool)
            if eager:
                with torch.cuda.stream(t):
                    y.add_(0.0)
            g2 = capture_graph(t, x, 128, pool)
            s.wait_stream(t)
            torch.cuda.synchronize()
            kept.extend([g1, g2])

        return go

    def minimal_k1() -> None:
        from bench.minimal import MinimalCapture

        with torch.cuda.stream(s):
            cap = MinimalCapture()
            with cap:
                for i in range(1, KERNELS + 1):
                    x.mul_(1.0001)
                    if i == 128:
                        cap.brk(_add_zero, y)
        torch.cuda.synchronize()
        kept.append(cap)

    def torch_graph_plain() -> None:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(4):
                y.mul_(1.0)
        torch.cuda.synchronize()
        kept.append(g)

    def cuda_free() -> None:
        a = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        del a
        torch.cuda.empty_cache()
        torch.cuda.synchronize()

    return {
        "none": lambda: None,
        "kernel_new_stream": kernel_new_stream,
        "wait_new_stream": wait_new_stream,
        "graph_on_new_stream": graph_on_new_stream,
        "two_graphs_shared_pool_on_s": raw_break(False, True, False),
        "eager_between_on_s_shared_pool": raw_break(False, True, True),
        "eager_between_on_new_stream_shared_pool": raw_break(True, True, True),
        "eager_between_on_new_stream_own_pools": raw_break(True, False, True),
        "minimal_k1": minimal_k1,
        "library_k1": lambda: kept.append(_library_k1(x, y, s)),
        "library_k1_caller_stream": lambda: kept.append(_library_k1(x, y, s, stream=s)),
        "library_k1_own_stream": lambda: kept.append(
            _library_k1(x, y, s, stream=torch.cuda.Stream())
        ),
        "torch_graph_plain": torch_graph_plain,
        "cuda_free": cuda_free,
    }


def _synced_us(replay: Callable[[], object], s: torch.cuda.Stream, n: int = 200) -> float:
    times = []
    with torch.cuda.stream(s):
        for _ in range(20):
            replay()
            torch.cuda.synchronize()
        for _ in range(n):
            torch.cuda.synchronize()
            start = time.perf_counter()
            replay()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1e6, 1)


def _minimal_on(x: torch.Tensor, y: torch.Tensor, cuts: set[int], stream: torch.cuda.Stream):
    from bench.minimal import MinimalCapture
    from bench.side_stream import Captured, body

    cap = MinimalCapture(stream=stream)
    with cap:
        body(x, y, cuts, lambda t: cap.brk(_add_zero, t))
    return Captured(cap.replay, [], [cap])


def issue_row(name: str) -> dict[str, object]:
    """The issue's k = 1 row for one capture, run first in this process."""
    from bench import side_stream

    s = torch.cuda.Stream()
    x = torch.randn(1024, device="cuda")
    y = torch.randn(1024, device="cuda")
    torch.cuda.synchronize()
    row: dict[str, object] = {"candidate": f"issue_{name}"}
    for k in (0, 1):
        cuts = {128} if k else set()
        with torch.cuda.stream(s):
            if name == "library_caller_stream":
                cap = side_stream._library(x, y, cuts, stream=s)
            elif name == "library_own_stream":
                cap = side_stream._library(x, y, cuts, stream=torch.cuda.Stream())
            elif name == "minimal_caller_stream":
                cap = _minimal_on(x, y, cuts, s)
            else:
                cap = side_stream.BUILDERS[name](x, y, cuts)
        torch.cuda.synchronize()
        row[f"k{k}_synced_us"] = _synced_us(cap.replay, s)
    row["added_us"] = round(row["k1_synced_us"] - row["k0_synced_us"], 1)  # type: ignore[operator]
    return row


def run(spec: str) -> dict[str, object]:
    """``spec`` is a candidate, optionally ``@control`` (default ``library_k1``)."""
    if spec.startswith("issue_"):
        return issue_row(spec[len("issue_") :])
    name, _, control = spec.partition("@")
    control = control or "library_k1"
    s = torch.cuda.Stream()
    x = torch.randn(1024, device="cuda")
    y = torch.randn(1024, device="cuda")
    z = torch.randn(1024, device="cuda")
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y.add_(0.0)  # the break's kernel has run once, eagerly, before anything
    torch.cuda.synchronize()
    reference = capture_graph(s, z, KERNELS)
    for _ in range(20):
        reference.replay()
    torch.cuda.synchronize()
    before = span_us(reference, s)
    table = candidates(x, y, s)
    table[name]()
    after = span_us(reference, s)
    table[control]()
    after_control = span_us(reference, s)
    return {
        "candidate": name,
        "control": control,
        "before_us": before,
        "after_us": after,
        "after_control_us": after_control,
    }


ISSUE_ROWS = (
    "issue_library",
    "issue_library_own_stream",
    "issue_library_caller_stream",
    "issue_minimal",
    "issue_minimal_caller_stream",
)
# Second round of questions (call K): does a capture on the caller's stream ever switch the
# process, alone or after another capture with a break?
# (``library_k1`` is the library as it now is, capturing on the caller's stream ``s``.)
FOLLOW_UPS = (
    "none@library_k1_own_stream",
    "library_k1_own_stream@library_k1_own_stream",
    "none@library_k1",
    "library_k1@library_k1",
    "eager_between_on_s_shared_pool@eager_between_on_s_shared_pool",
    "minimal_k1@minimal_k1",
    "library_k1@minimal_k1",
)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] != "--all":
        print(json.dumps(run(sys.argv[1])), flush=True)
        return
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    if len(sys.argv) > 3 and sys.argv[3] == "follow-ups":
        names = list(FOLLOW_UPS) + list(ISSUE_ROWS)
    else:
        # Only the table's names: nothing is called, so this process never starts CUDA.
        names = list(candidates(None, None, None)) + list(ISSUE_ROWS)  # type: ignore[arg-type]
    print_each_in_fresh_child("bench.probes.state_trigger", names * rounds)


if __name__ == "__main__":
    main()
