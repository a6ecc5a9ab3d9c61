"""An engine's batch-size sweep: start-up, graph memory and replay of five ways to capture it.

The model is a Llama-shaped decode step (RMSNorm, fused QKV, attention over a KV cache, SwiGLU;
8 layers of hidden 1024 in bf16 by default). Every size of the sweep (1, 2, 4, then every 8 up
to 512: 67 sizes) is captured largest first into one pool, on one capture stream, from static
buffers of the largest batch sliced per size, outputs held by non-owning aliases (as vLLM holds
them) in every column:

* ``capture_set``: ``breakable_cudagraph.CaptureSet``; attention is an eager break that reads
  the batch's longest sequence on the host and attends over that many cache positions.
* ``capture_set_shared``: the same capture set sharing executables across sizes
  (``share_executables=True``: one per segment position where the sizes launch the same
  kernels, switched by ``cudaGraphExecUpdate``).
* ``per_capture``: the loop vLLM's runner writes: one ``BreakableCUDAGraphCapture(pool=pool,
  stream=stream)`` per size, largest first, attention an ``eager_break_during_capture``
  break, the collector left as the library handles it per capture.
* ``minimal``: ``bench.minimal.MinimalCapture`` doing the same sweep with the same break
  (the collector paused once for the sweep, as the capture set does).
* ``full_graph``: one CUDA graph per size with attention inside it, over the whole cache and
  masked on the device (capturable); ``torch.cuda.graph``'s per-capture ``gc.collect`` and
  ``empty_cache`` are left out, as vLLM patches them out: the lower bound on time and memory.

Each column runs in a fresh process, in both orders (``capture_set, minimal, full_graph`` then
the reverse; with ``--rounds N``, N rotations of that pair), after one unmeasured process that
takes the machine's first-use costs. Every
size is first run eagerly on the capture stream (kernels, cuBLAS handles
and workspaces exist before the measured window, as after an engine's profiling run), then the
sweep is timed. Reported: the sweep's time, that time over the same process's warm-up (the
host's speed varies from process to process; the ratio divides it out), the capturing thread's
CPU time, the pool's reserved bytes (``memory_reserved``
delta) and the device memory beyond it (``mem_get_info`` delta minus the reserved delta: the
instantiated graphs), and the median of synced replays at batch 1, 8 and 64 on the capture
stream (static inputs copied in, as an engine's step does), each checked against the eager step,
and the median of synced calls alternating between batch 1 and 64 (a sharing column switches
its executables at every such call) and repeating batch 1 (as the replay at batch 1).

Usage: ``python -m bench.capture_sweep [--layers 8 32] [--rounds 3] [--out DIR] [--quick] [--device sim]``;
writes ``capture_sweep.json``, ``capture_sweep.md`` and, when matplotlib imports,
``capture_sweep.png`` to ``--out`` (default ``$OUT``, else ``results/<device>/capture_sweep``).
"""

from __future__ import annotations

import argparse
import bisect
import functools
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: bench/ is first on the path, not the root
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from verification.devices import device_context, resolve_kind  # noqa: E402
from verification.errors import UsageError  # noqa: E402

COLUMNS = ("capture_set", "capture_set_shared", "per_capture", "minimal", "full_graph")
SIZES = (1, 2, 4, *range(8, 513, 8))
REPLAY_BATCHES = (1, 8, 64)
MIB = 2**20


@dataclass(frozen=True)
class Shape:
    layers: int = 8
    hidden: int = 1024
    heads: int = 8
    ffn: int = 2816
    context: int = 64  # KV cache positions per sequence
    sizes: tuple[int, ...] = SIZES
    batches: tuple[int, ...] = REPLAY_BATCHES
    replays: int = 50


QUICK = Shape(layers=2, hidden=32, heads=2, ffn=64, context=8, sizes=(1, 2, 4, 8, 16))
QUICK = replace(QUICK, batches=(1, 8), replays=3)


class HostLengths:
    """Sequence lengths the scheduler knows on the host before each step."""

    def __init__(self, lengths: list[int]) -> None:
        self.lengths = lengths


def _attend(q, k, v, positions, keys, values, length: int, out: torch.Tensor) -> None:
    """Writes this step's keys and values at each sequence's position, then attends over the
    first ``length`` cache positions, each sequence masked past its own position."""
    batch = q.shape[0]
    rows = torch.arange(batch, device=q.device)
    keys[rows, positions] = k
    values[rows, positions] = v
    seen = torch.arange(length, device=q.device).view(1, 1, 1, length)
    mask = seen <= positions.view(batch, 1, 1, 1)
    o = F.scaled_dot_product_attention(
        q.unsqueeze(2),
        keys[:batch, :length].transpose(1, 2),
        values[:batch, :length].transpose(1, 2),
        attn_mask=mask,
    )
    out.copy_(o.squeeze(2))


def host_attention(host: HostLengths, q, k, v, positions, keys, values, out) -> None:
    """The break: the longest sequence of the batch is read on the host (not capturable).
    ``host`` is bound before the call, as vLLM's attention reads its forward context, so a
    break's arguments are tensors only."""
    _attend(q, k, v, positions, keys, values, max(host.lengths[: q.shape[0]]), out)


def reading(host: HostLengths) -> Callable[..., None]:
    """``host_attention`` with ``host`` bound, as a plain function (a break's name is its own)."""

    def attention(q, k, v, positions, keys, values, out) -> None:
        host_attention(host, q, k, v, positions, keys, values, out)

    return attention


def dense_attention(q, k, v, positions, keys, values, out) -> None:
    """Capturable: attends over the whole cache, masked on the device."""
    _attend(q, k, v, positions, keys, values, keys.shape[1], out)


class DecodeStep:
    """Random weights and a KV cache for the largest batch; ``forward(h, positions, attention)``
    returns the normed hidden states of one decode step."""

    def __init__(self, shape: Shape, device: str) -> None:
        gen = torch.Generator().manual_seed(0)
        d, dtype, top = shape.hidden, torch.bfloat16, max(shape.sizes)

        def w(*dims: int) -> torch.Tensor:
            return (torch.randn(*dims, generator=gen) * dims[0] ** -0.5).to(device, dtype)

        self.shape = shape
        self.layers = [
            (w(d, 3 * d), w(d, d), w(d, 2 * shape.ffn), w(shape.ffn, d))
            for _ in range(shape.layers)
        ]
        self.norm = torch.ones(d, device=device, dtype=dtype)
        head_dim = d // shape.heads
        cache = (top, shape.context, shape.heads, head_dim)
        self.caches = [
            (
                torch.zeros(cache, device=device, dtype=dtype),
                torch.zeros(cache, device=device, dtype=dtype),
            )
            for _ in range(shape.layers)
        ]
        self.host = HostLengths([shape.context // 2] * top)

    def forward(
        self, h: torch.Tensor, positions: torch.Tensor, attention: Callable
    ) -> torch.Tensor:
        d, heads = self.shape.hidden, self.shape.heads
        batch = h.shape[0]
        for (wqkv, wo, w_gate_up, w_down), (keys, values) in zip(self.layers, self.caches):
            x = F.rms_norm(h, (d,), self.norm)
            q, k, v = (x @ wqkv).view(batch, 3, heads, d // heads).unbind(1)
            out = torch.empty_like(q)
            attention(q, k, v, positions, keys, values, out)
            h = h + out.view(batch, d) @ wo
            gate, up = (F.rms_norm(h, (d,), self.norm) @ w_gate_up).chunk(2, dim=-1)
            h = h + (F.silu(gate) * up) @ w_down
        return F.rms_norm(h, (d,), self.norm)


_construct_storage = getattr(torch._C, "_construct_storage_from_data_pointer", None)


def _weak(tensor: torch.Tensor) -> torch.Tensor:
    """A view of ``tensor``'s memory that keeps nothing alive (strong where torch lacks it)."""
    if _construct_storage is None:
        return tensor
    storage = tensor.untyped_storage()
    borrowed = _construct_storage(storage.data_ptr(), tensor.device, storage.nbytes())
    return tensor.new_empty(0).set_(
        borrowed, tensor.storage_offset(), tensor.size(), tensor.stride()
    )


class _SliceSweep:
    """The engine's side of a hand-made sweep: static buffers of the largest batch, one replay
    per size, a call copying the batch in, padding, replaying and slicing the output."""

    def __init__(self, model: DecodeStep, sizes: tuple[int, ...]) -> None:
        top = max(sizes)
        device = model.norm.device
        self.h = torch.zeros(top, model.shape.hidden, device=device, dtype=torch.bfloat16)
        self.positions = torch.zeros(top, device=device, dtype=torch.long)
        self.ascending = sorted(sizes)
        self.replays: dict[int, Callable[[], Any]] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        self.graphs = 0  # instantiated graphs, over every size

    def __call__(self, h: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        n = h.shape[0]
        size = self.ascending[bisect.bisect_left(self.ascending, n)]
        self.h[:n].copy_(h)
        self.positions[:n].copy_(positions)
        if n < size:
            self.h[n:size].zero_()
            self.positions[n:size].zero_()
        self.replays[size]()
        return self.outputs[size][:n]


def sweep_capture_set(
    model: DecodeStep, stream: torch.cuda.Stream, share_executables: bool = False
) -> Callable:
    import breakable_cudagraph as bcg

    attention = bcg.eager_break_during_capture(reading(model.host))
    device = model.norm.device
    examples = (
        torch.zeros(1, model.shape.hidden, device=device, dtype=torch.bfloat16),
        torch.zeros(1, device=device, dtype=torch.long),
    )
    return bcg.CaptureSet(
        lambda h, positions: model.forward(h, positions, attention),
        model.shape.sizes,
        examples,
        warmup=0,  # every size was run eagerly before the measured window
        stream=stream,
        share_executables=share_executables,
    )


def sweep_per_capture(model: DecodeStep, stream: torch.cuda.Stream) -> Callable:
    import breakable_cudagraph as bcg

    sweep = _SliceSweep(model, model.shape.sizes)
    pool = torch.cuda.graph_pool_handle()
    attention = bcg.eager_break_during_capture(reading(model.host))
    for size in sorted(model.shape.sizes, reverse=True):
        with bcg.BreakableCUDAGraphCapture(pool=pool, stream=stream) as capture:
            out = model.forward(sweep.h[:size], sweep.positions[:size], attention)
        sweep.replays[size], sweep.outputs[size] = capture.replay, _weak(out)
        sweep.graphs += capture.num_graphs
    return sweep


def sweep_minimal(model: DecodeStep, stream: torch.cuda.Stream) -> Callable:
    from bench.minimal import MinimalCapture

    sweep = _SliceSweep(model, model.shape.sizes)
    pool = torch.cuda.graph_pool_handle()
    current: list[Any] = [None]
    host_read = reading(model.host)

    def attention(*args: Any) -> None:
        current[0].brk(host_read, *args)

    enabled = gc.isenabled()
    gc.disable()
    try:
        for size in sorted(model.shape.sizes, reverse=True):
            capture = current[0] = MinimalCapture(pool, stream)
            with capture:
                out = model.forward(sweep.h[:size], sweep.positions[:size], attention)
            sweep.replays[size], sweep.outputs[size] = capture.replay, _weak(out)
            sweep.graphs += sum(not isinstance(s, functools.partial) for s in capture.steps)
    finally:
        if enabled:
            gc.enable()
    return sweep


def sweep_full_graph(model: DecodeStep, stream: torch.cuda.Stream) -> Callable:
    sweep = _SliceSweep(model, model.shape.sizes)
    pool = torch.cuda.graph_pool_handle()
    enabled = gc.isenabled()
    gc.disable()
    stream.wait_stream(torch.cuda.current_stream())
    try:
        with torch.cuda.stream(stream):
            for size in sorted(model.shape.sizes, reverse=True):
                graph = torch.cuda.CUDAGraph()
                graph.capture_begin(pool=pool)
                out = model.forward(sweep.h[:size], sweep.positions[:size], dense_attention)
                graph.capture_end()
                sweep.replays[size], sweep.outputs[size] = graph.replay, _weak(out)
                sweep.graphs += 1
    finally:
        torch.cuda.current_stream().wait_stream(stream)
        if enabled:
            gc.enable()
    return sweep


SWEEPS = {
    "capture_set": sweep_capture_set,
    "capture_set_shared": functools.partial(sweep_capture_set, share_executables=True),
    "per_capture": sweep_per_capture,
    "minimal": sweep_minimal,
    "full_graph": sweep_full_graph,
}


def _graph_count(call: Any) -> int:
    """Executables the sweep instantiated: a capture set counts its captures' graph segments,
    a segment sharing an executable with others counting it once."""
    captures = getattr(call, "captures", None)
    if captures is None:
        return call.graphs
    from breakable_cudagraph.segments import GraphSegment

    own, shared = 0, set()
    for capture in captures:
        for segment in capture.segments:
            if isinstance(segment, GraphSegment):
                if segment.shared is None:
                    own += 1
                else:
                    shared.add(id(segment.shared))
    return own + len(shared)


def _step_inputs(model: DecodeStep, batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    device = model.norm.device
    h = torch.randn(batch, model.shape.hidden, generator=gen).to(device, torch.bfloat16)
    positions = torch.randint(0, model.shape.context, (batch,), generator=gen)
    model.host.lengths[:batch] = (positions + 1).tolist()
    return h, positions.to(device)


def measure(column: str, shape: Shape, device: str) -> dict[str, Any]:
    """One column in this process: warm-up, the timed sweep, its memory, replays."""
    model = DecodeStep(shape, device)
    attention = dense_attention if column == "full_graph" else reading(model.host)
    stream = torch.cuda.Stream()
    top = max(shape.sizes)
    h = torch.zeros(top, shape.hidden, device=device, dtype=torch.bfloat16)
    positions = torch.zeros(top, device=device, dtype=torch.long)
    began = time.perf_counter()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for size in sorted(shape.sizes, reverse=True):
            model.forward(h[:size], positions[:size], attention)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    warmup_s = time.perf_counter() - began
    del h, positions
    gc.collect()
    torch.cuda.synchronize()
    reserved, free = torch.cuda.memory_reserved(), torch.cuda.mem_get_info()[0]
    began, cpu = time.perf_counter(), time.thread_time()
    call = SWEEPS[column](model, stream)
    torch.cuda.synchronize()
    capture_s = time.perf_counter() - began
    capture_cpu_s = time.thread_time() - cpu
    pool_bytes = torch.cuda.memory_reserved() - reserved
    beyond_bytes = free - torch.cuda.mem_get_info()[0] - pool_bytes
    # The breaks ran at capture on what the graphs had not computed yet and wrote it into the
    # cache (an engine points capture-time writes at dummy slots): start from a clean cache.
    for keys, values in model.caches:
        keys.zero_()
        values.zero_()
    replays: dict[str, float] = {}
    correct = True
    exact = reading(model.host)
    # Replays run on the capture stream, as an engine that captures on the stream it replays
    # on (a chain replayed on another stream than it was captured on runs every kernel slower).
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for batch in (b for b in shape.batches if b <= top):
            step_h, step_positions = _step_inputs(model, batch, seed=batch)
            expected = model.forward(step_h, step_positions, exact).float()
            got = call(step_h, step_positions).float()
            correct &= bool(torch.allclose(got, expected, rtol=3e-2, atol=3e-2))
            times = []
            for _ in range(shape.replays):
                torch.cuda.synchronize()
                start = time.perf_counter()
                call(step_h, step_positions)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
            replays[str(batch)] = statistics.median(times)
        alternating = _alternating_s(call, model, shape)
    return {
        "column": column,
        "warmup_s": warmup_s,
        "capture_s": capture_s,
        "capture_cpu_s": capture_cpu_s,
        "pool_bytes": pool_bytes,
        "beyond_pool_bytes": beyond_bytes,
        "graphs": _graph_count(call),
        "replay_s": replays,
        "alternating_s": alternating,
        "correct": correct,
    }


def _alternating_s(call: Callable, model: DecodeStep, shape: Shape) -> dict[str, float]:
    """Median seconds of a synced call alternating between the smallest and the largest
    replayed batch, and of one repeating the smallest."""
    low, high = min(shape.batches), max(b for b in shape.batches if b <= max(shape.sizes))
    inputs = {b: _step_inputs(model, b, seed=b) for b in (low, high)}
    timed: dict[str, list[float]] = {"alternate": [], "repeat": []}
    for kind, order in (("alternate", (low, high)), ("repeat", (low, low))):
        for i in range(2 * shape.replays):
            h, positions = inputs[order[i % 2]]
            torch.cuda.synchronize()
            start = time.perf_counter()
            call(h, positions)
            torch.cuda.synchronize()
            timed[kind].append(time.perf_counter() - start)
    return {kind: statistics.median(times) for kind, times in timed.items()}


def _child(column: str, shape: Shape, kind: str, timeout: float) -> dict[str, Any]:
    """``measure`` in a fresh interpreter; its JSON row, or the reason it gave none."""
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "row.json"
        command = [sys.executable, "-m", "bench.capture_sweep", "--column", column]
        command += ["--device", kind, "--shape", json.dumps(asdict(shape)), "--row", str(path)]
        try:
            done = subprocess.run(
                command, cwd=ROOT, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            return {"column": column, "error": f"timed out after {timeout:.0f} s"}
        if done.returncode != 0 or not path.exists():
            return {
                "column": column,
                "error": done.stderr.strip()[-2000:] or f"exit {done.returncode}",
            }
        return json.loads(path.read_text())


def _cell(runs: list[dict[str, Any]], pick: Callable[[dict[str, Any]], float], fmt: str) -> str:
    values = [pick(run) for run in runs if "error" not in run]
    text = " / ".join(format(value, fmt) for value in values) or "failed"
    if len(values) > 2:  # several rounds: the figure to compare columns by
        text += f" (median {format(statistics.median(values), '.3f' if fmt == 'd' else fmt)})"
    return text


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Capture sweep",
        "",
        f"{result['device']}, torch {result['torch']}; each cell: the run in order "
        f"{', '.join(COLUMNS)} / the run in the reverse order, each column in a fresh process.",
    ]
    for layers, runs in result["layers"].items():
        shape = runs["shape"]
        lines += [
            "",
            f"## {layers} layers, hidden {shape['hidden']}, {len(shape['sizes'])} sizes up to "
            f"{max(shape['sizes'])}",
            "",
            "| | " + " | ".join(COLUMNS) + " |",
            "|---|" + "---|" * len(COLUMNS),
        ]
        rows: list[tuple[str, Callable[[dict[str, Any]], float], str]] = [
            ("warm-up of every size (eager), s", lambda r: r["warmup_s"], ".3f"),
            ("capture of every size, s", lambda r: r["capture_s"], ".3f"),
            # The host's speed moves from one process to the next (capture 0.36 to 0.63 s on
            # the H200 for the same code); both figures below divide it out or leave it out.
            ("capture / warm-up, same process", lambda r: r["capture_s"] / r["warmup_s"], ".4f"),
            (
                "capture, the capturing thread's CPU s",
                lambda r: r.get("capture_cpu_s", float("nan")),
                ".3f",
            ),
            ("pool reserved, MiB", lambda r: r["pool_bytes"] / MIB, ".1f"),
            ("device memory beyond the pool, MiB", lambda r: r["beyond_pool_bytes"] / MIB, ".1f"),
            ("instantiated graphs", lambda r: r["graphs"], "d"),
            (
                "graph memory (pool + beyond), MiB",
                lambda r: (r["pool_bytes"] + r["beyond_pool_bytes"]) / MIB,
                ".1f",
            ),
        ]
        rows += [
            (f"replay at batch {b}, us", lambda r, b=b: r["replay_s"][str(b)] * 1e6, ".1f")
            for b in shape["batches"]
            if b <= max(shape["sizes"])
        ]
        rows += [
            (
                "calls alternating batch 1 and the largest, us",
                lambda r: r.get("alternating_s", {}).get("alternate", float("nan")) * 1e6,
                ".1f",
            ),
            (
                "calls repeating batch 1, us",
                lambda r: r.get("alternating_s", {}).get("repeat", float("nan")) * 1e6,
                ".1f",
            ),
        ]
        for label, pick, fmt in rows:
            cells = [_cell(runs["columns"][c], pick, fmt) for c in COLUMNS]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        correct = {c: all(r.get("correct") for r in runs["columns"][c]) for c in COLUMNS}
        lines += ["", f"Replays equal to the eager step: {correct}"]
        for column in COLUMNS:
            for run in runs["columns"][column]:
                if "error" in run:
                    lines += ["", f"{column} failed: `{run['error'].splitlines()[-1]}`"]
    return "\n".join(lines) + "\n"


def _first_run(runs: dict[str, Any], column: str) -> dict[str, Any] | None:
    ok = [run for run in runs["columns"][column] if "error" not in run]
    return ok[0] if ok else None


def plot(result: dict[str, Any], path: Path) -> bool:
    """A PNG of capture time, graph memory and replay per column, if matplotlib imports."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    groups = list(result["layers"].items())
    fig, axes = plt.subplots(len(groups), 3, figsize=(13, 3.6 * len(groups)), squeeze=False)
    for row, (layers, runs) in zip(axes, groups):
        found = {c: _first_run(runs, c) for c in COLUMNS}
        names = [c for c in COLUMNS if found[c] is not None]
        if not names:
            continue
        row[0].bar(names, [found[c]["capture_s"] for c in names])
        row[0].set_title(f"{layers} layers: capture of every size (s)")
        pool = [found[c]["pool_bytes"] / MIB for c in names]
        row[1].bar(names, pool, label="pool reserved")
        row[1].bar(
            names,
            [found[c]["beyond_pool_bytes"] / MIB for c in names],
            bottom=pool,
            label="beyond the pool",
        )
        row[1].set_title("graph memory (MiB)")
        row[1].legend()
        batches = list(found[names[0]]["replay_s"])
        width = 0.8 / len(names)
        for index, c in enumerate(names):
            xs = [i + index * width for i in range(len(batches))]
            row[2].bar(xs, [found[c]["replay_s"][b] * 1e6 for b in batches], width, label=c)
        row[2].set_xticks(
            [i + 0.4 - width / 2 for i in range(len(batches))], [f"batch {b}" for b in batches]
        )
        row[2].set_title("replay (us, median)")
        row[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.capture_sweep", description=__doc__.splitlines()[0]
    )
    p.add_argument("--device", default="auto", help="auto, cuda or sim (default auto)")
    p.add_argument("--layers", type=int, nargs="+", help="one run per layer count (default 8)")
    p.add_argument("--replays", type=int, default=50, help="synced replays timed per batch")
    p.add_argument(
        "--rounds", type=int, default=1, help="times each column runs in both orders (default 1)"
    )
    p.add_argument(
        "--out",
        type=Path,
        help="results folder (default $OUT, else results/<device>/capture_sweep)",
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes (the simulator smoke test)")
    p.add_argument("--timeout", type=float, default=150.0, help="seconds per column's process")
    p.add_argument("--column", choices=COLUMNS, help=argparse.SUPPRESS)  # a child's column
    p.add_argument("--shape", help=argparse.SUPPRESS)
    p.add_argument("--row", type=Path, help=argparse.SUPPRESS)
    return p


def _orders(rounds: int) -> list[tuple[str, ...]]:
    """Each round: the columns in one rotation, then reversed; over three rounds every column
    runs first twice (the first process of a round ran up to 1.7 times slower on the H200)."""
    orders = []
    for r in range(rounds):
        rotation = COLUMNS[r % len(COLUMNS) :] + COLUMNS[: r % len(COLUMNS)]
        orders += [rotation, rotation[::-1]]
    return orders


def _run_child(args: argparse.Namespace) -> None:
    data = json.loads(args.shape)
    shape = Shape(**{**data, "sizes": tuple(data["sizes"]), "batches": tuple(data["batches"])})
    with device_context(args.device) as device:
        row = measure(args.column, shape, device)
    args.row.write_text(json.dumps(row))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        kind = resolve_kind(args.device)
        if args.column is not None:
            _run_child(args)
            return 0
        if any(layers < 1 for layers in args.layers or ()) or min(args.replays, args.rounds) < 1:
            raise UsageError("--layers, --replays and --rounds must be at least 1")
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    base = QUICK if args.quick else Shape(replays=args.replays)
    out = args.out or (
        Path(os.environ["OUT"])
        if os.environ.get("OUT")
        else ROOT / "results" / kind / "capture_sweep"
    )
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"device": kind, "torch": torch.__version__, "layers": {}}
    if kind == "cuda":
        result["device"] = torch.cuda.get_device_name()
    # The first process on a fresh machine runs cold (clocks, the driver's and cuBLAS's
    # first-use work): its warm-up took 1.4 times the others'. One unmeasured process takes
    # that, so neither order's first column pays it.
    warm = _child(
        COLUMNS[-1], replace(base, layers=min(args.layers or [base.layers])), kind, args.timeout
    )
    print(f"warm-up process (not reported): {warm.get('capture_s', warm)}", flush=True)
    for layers in args.layers or [base.layers]:
        shape = replace(base, layers=layers)
        columns: dict[str, list[dict[str, Any]]] = {c: [] for c in COLUMNS}
        for order in _orders(args.rounds):
            for column in order:
                row = _child(column, shape, kind, args.timeout)
                columns[column].append(row)
                print(f"{layers} layers, {column}: {row}", flush=True)
        result["layers"][str(layers)] = {"shape": asdict(shape), "columns": columns}
    (out / "capture_sweep.json").write_text(json.dumps(result, indent=2))
    text = markdown(result)
    (out / "capture_sweep.md").write_text(text)
    print(text)
    if plot(result, out / "capture_sweep.png"):
        print(f"plot: {out / 'capture_sweep.png'}")
    failed = any(
        "error" in r or not r["correct"]
        for g in result["layers"].values()
        for rs in g["columns"].values()
        for r in rs
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
