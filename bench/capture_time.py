"""Capture cost of a chain with many eager breaks: this library against peers.

Times capturing one program of ``B`` eager breaks (each break between two small graph
segments) with (1) a minimal loop of bare ``capture_begin``/``capture_end`` pairs that
shares one pool, (2) ``breakable_cudagraph`` and (3) the PyPI package
``breakable-cuda-graphs`` when it is installed. All three run in the same process on the
same device, so the ratios are what to read. Writes ``results/capture_time_<device>.json``.

Usage: ``python bench/capture_time.py [--device cuda|sim] [--breaks 64 128 255] [--repeats 5]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from verification.devices import device_context, resolve_kind
from verification.errors import UsageError

RESULTS = Path(__file__).resolve().parent.parent / "results"


def _body(x: torch.Tensor, breaks: int, brk: Callable[[torch.Tensor], None]) -> None:
    for _ in range(breaks):
        x.mul_(1.0001).add_(0.5)
        brk(x)
    x.mul_(0.5)


def _minimal(x: torch.Tensor, breaks: int) -> None:
    """The floor: one pool, bare segment begin/end, eager step in between."""
    pool = torch.cuda.graph_pool_handle()
    segments: list[Callable[[], object]] = []
    graph = torch.cuda.CUDAGraph()
    graph.capture_begin(pool=pool)

    def brk(t: torch.Tensor) -> None:
        nonlocal graph
        graph.capture_end()
        segments.append(graph.replay)
        t.add_(1.0)
        segments.append(lambda: t.add_(1.0))
        graph = torch.cuda.CUDAGraph()
        graph.capture_begin(pool=pool)

    _body(x, breaks, brk)
    graph.capture_end()
    segments.append(graph.replay)


def _ours(x: torch.Tensor, breaks: int) -> None:
    import breakable_cudagraph as bcg

    @bcg.eager_break_during_capture
    def brk(t: torch.Tensor) -> None:
        t.add_(1.0)

    with bcg.BreakableCUDAGraphCapture():
        _body(x, breaks, brk)


def _peer(x: torch.Tensor, breaks: int) -> None:
    import breakable_cuda_graphs as bcgs

    @bcgs.no_graph
    def brk(t: torch.Tensor) -> None:
        t.add_(1.0)

    with bcgs.breakable_graph(bcgs.BreakableCUDAGraph()):
        _body(x, breaks, brk)


def _have_peer() -> bool:
    try:
        import breakable_cuda_graphs  # noqa: F401
    except ImportError:
        return False
    return True


def _time(fn: Callable[[torch.Tensor, int], None], device: str, breaks: int, repeats: int) -> float:
    samples = []
    for _ in range(repeats + 1):
        x = torch.ones(1024, device=device)
        torch.cuda.synchronize()
        start = time.perf_counter()
        if torch.cuda.current_stream() == torch.cuda.default_stream():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            ctx = torch.cuda.stream(side)
        else:
            ctx = contextlib.nullcontext()
        with ctx:
            fn(x, breaks)
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples[1:])  # the first run pays one-time setup


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "sim"), default="cuda")
    parser.add_argument("--breaks", type=int, nargs="+", default=[64, 128, 255])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    try:
        kind = resolve_kind(args.device)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    impls: dict[str, Callable[[torch.Tensor, int], None]] = {
        "minimal": _minimal,
        "breakable_cudagraph": _ours,
    }
    if _have_peer():
        impls["breakable_cuda_graphs"] = _peer
    rows = []
    with device_context(kind) as device:
        for breaks in args.breaks:
            row: dict[str, float | int] = {"breaks": breaks}
            for name, fn in impls.items():
                row[f"{name}_s"] = _time(fn, device, breaks, args.repeats)
            for name in impls:
                if name != "minimal":
                    row[f"{name}_vs_minimal"] = row[f"{name}_s"] / row["minimal_s"]
            rows.append(row)
            print(json.dumps(row))
    meta = {
        "device": args.device,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
        "repeats": args.repeats,
        "rows": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"capture_time_{args.device}.json"
    out.write_text(json.dumps(meta, indent=2) + "\n")
    print(f"capture_time: wrote {out.relative_to(RESULTS.parent)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
