"""GPU probe: does instantiating a sweep's graphs on a worker thread shorten the sweep?

A breakable capture of an engine's sweep ends a graph at every break, and ``capture_end``
instantiates it (``cudaGraphInstantiate``) before the next segment begins: 603 instantiations
for the 8-layer, 67-size sweep of ``bench.capture_sweep``, against 67 for one full graph per
size. A graph made with ``CUDAGraph(keep_graph=True)`` ends its capture without instantiating;
``instantiate()`` can then run on another thread, without the GIL, while the capturing thread
goes on. This probe times the same sweep (``bench.capture_sweep``'s model and minimal break
loop) three ways in one process, rotated over rounds:

* ``minimal``: ``capture_end`` instantiates, as today;
* ``kept``: every graph kept, then instantiated one after another once the sweep is captured
  (the cost of instantiation alone is the difference);
* ``overlap``: every graph kept and handed to one worker thread that instantiates it while the
  next segments capture; the sweep ends when the worker is done.

It reports each variant's sweep time (first round left out), the per-round ratio to ``minimal``,
the capturing thread's CPU time, the worker's instantiation time, and whether the last round's
replays at batch 1, 8 and 64 equal the eager step. Captures are ``thread_local`` by default;
``--mode global`` tells whether CUDA lets another thread instantiate during a global capture.

``python -m bench.probes.instantiate_overlap [--mode thread_local|global] [--rounds 4]
[--out DIR]``: prints one JSON line per sweep and a summary; writes
``instantiate_overlap_<mode>.json`` to ``--out`` (default ``$OUT``, else the working folder).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import queue
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import torch

from bench import capture_sweep
from bench.minimal import MinimalCapture

VARIANTS = ("minimal", "kept", "overlap")


class _Instantiator:
    """One worker thread instantiating the graphs it is handed, in order."""

    def __init__(self) -> None:
        self.spent_s = 0.0
        self.failed: BaseException | None = None
        self._queue: queue.Queue[torch.cuda.CUDAGraph | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (graph := self._queue.get()) is not None:
            began = time.perf_counter()
            try:
                graph.instantiate()
            except BaseException as error:  # reported by finish(), on the capturing thread
                self.failed = self.failed or error
            self.spent_s += time.perf_counter() - began

    def put(self, graph: torch.cuda.CUDAGraph) -> None:
        self._queue.put(graph)

    def finish(self) -> None:
        self._queue.put(None)
        self._thread.join()
        if self.failed is not None:
            raise self.failed


class _Capture(MinimalCapture):
    """``bench.minimal.MinimalCapture`` whose graphs are kept (instantiated later, by the caller
    or by ``worker``) or not, captured in CUDA's capture mode ``mode``."""

    def __init__(
        self, pool: Any, stream: torch.cuda.Stream, keep: bool, mode: str, worker: Any
    ) -> None:
        super().__init__(pool, stream)
        self.keep, self.mode, self.worker = keep, mode, worker
        self.graphs: list[torch.cuda.CUDAGraph] = []

    def _begin(self) -> None:
        self._graph = torch.cuda.CUDAGraph(keep_graph=self.keep)
        self._graph.capture_begin(pool=self.pool, capture_error_mode=self.mode)

    def _end(self) -> None:
        graph = self._graph
        super()._end()
        assert graph is not None
        self.graphs.append(graph)
        if self.worker is not None:
            self.worker.put(graph)


def sweep(
    model: capture_sweep.DecodeStep, stream: torch.cuda.Stream, variant: str, mode: str
) -> tuple[Any, dict[str, Any]]:
    """One sweep of ``model``'s sizes, largest first, into a new pool: the call that replays
    it and its timings."""
    pool = torch.cuda.graph_pool_handle()
    worker = _Instantiator() if variant == "overlap" else None
    sliced = capture_sweep._SliceSweep(model, model.shape.sizes)
    host = capture_sweep.reading(model.host)
    current: list[Any] = [None]

    def attention(*args: Any) -> None:
        current[0].brk(host, *args)

    captures: list[_Capture] = []
    gc.disable()
    began, cpu = time.perf_counter(), time.thread_time()
    try:
        for size in sorted(model.shape.sizes, reverse=True):
            capture = current[0] = _Capture(pool, stream, variant != "minimal", mode, worker)
            captures.append(capture)
            with capture:
                out = model.forward(sliced.h[:size], sliced.positions[:size], attention)
            sliced.outputs[size] = capture_sweep._weak(out)
            sliced.replays[size] = capture.replay
        captured_s = time.perf_counter() - began
        instantiate_s = 0.0
        if variant == "kept":
            for capture in captures:
                for graph in capture.graphs:
                    start = time.perf_counter()
                    graph.instantiate()
                    instantiate_s += time.perf_counter() - start
        if worker is not None:
            worker.finish()
            instantiate_s = worker.spent_s
        torch.cuda.synchronize()
        total_s = time.perf_counter() - began
        cpu_s = time.thread_time() - cpu
    finally:
        gc.enable()
    return sliced, {
        "variant": variant,
        "total_s": total_s,
        "captured_s": captured_s,
        "capturing_thread_cpu_s": cpu_s,
        "instantiate_s": instantiate_s,
        "graphs": sum(len(capture.graphs) for capture in captures),
    }


def replays_correct(model: capture_sweep.DecodeStep, call: Any, stream: torch.cuda.Stream) -> bool:
    """Whether ``call`` equals the eager step at the shape's replay batches (1, 8 and 64),
    each from a clean cache."""
    exact = capture_sweep.reading(model.host)
    correct = True
    with torch.cuda.stream(stream):
        for batch in (b for b in model.shape.batches if b <= max(model.shape.sizes)):
            h, positions = capture_sweep._step_inputs(model, batch, seed=batch)
            for keys, values in model.caches:
                keys.zero_()
                values.zero_()
            expected = model.forward(h, positions, exact).float()
            for keys, values in model.caches:
                keys.zero_()
                values.zero_()
            got = call(h, positions).float()
            correct &= bool(torch.allclose(got, expected, rtol=3e-2, atol=3e-2))
    torch.cuda.synchronize()
    return correct


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.probes.instantiate_overlap")
    parser.add_argument("--mode", choices=("thread_local", "global"), default="thread_local")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = parser.parse_args()
    shape = capture_sweep.Shape(layers=8)
    model = capture_sweep.DecodeStep(shape, "cuda")
    stream = torch.cuda.Stream()
    top = max(shape.sizes)
    h = torch.zeros(top, shape.hidden, device="cuda", dtype=torch.bfloat16)
    positions = torch.zeros(top, device="cuda", dtype=torch.long)
    with torch.cuda.stream(stream):  # kernels, handles and workspaces exist before any sweep
        for size in sorted(shape.sizes, reverse=True):
            model.forward(h[:size], positions[:size], capture_sweep.reading(model.host))
    torch.cuda.synchronize()
    rows = []
    for round_ in range(args.rounds):
        shift = round_ % len(VARIANTS)
        for variant in VARIANTS[shift:] + VARIANTS[:shift]:
            try:
                call, row = sweep(model, stream, variant, args.mode)
            except Exception as error:  # a refused variant is a result, not the end of the probe
                call, row = None, {"variant": variant, "error": repr(error)}
            row["round"] = round_
            if call is not None and round_ == args.rounds - 1:
                row["correct"] = replays_correct(model, call, stream)
            rows.append(row)
            print(json.dumps(row), flush=True)
            del call
            gc.collect()
            torch.cuda.synchronize()
    timed = [r for r in rows if r["round"] > 0 and "total_s" in r]
    summary: dict[str, Any] = {"mode": args.mode, "torch": torch.__version__}
    for variant in VARIANTS:
        totals = [r["total_s"] for r in timed if r["variant"] == variant]
        if totals:
            summary[f"{variant}_median_s"] = statistics.median(totals)
    for variant in ("kept", "overlap"):
        ratios = []
        for round_ in range(1, args.rounds):
            pair = {r["variant"]: r["total_s"] for r in timed if r["round"] == round_}
            if variant in pair and "minimal" in pair:
                ratios.append(pair[variant] / pair["minimal"])
        if ratios:
            summary[f"{variant}_over_minimal_per_round"] = ratios
    print(json.dumps(summary))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"instantiate_overlap_{args.mode}.json"
    path.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
