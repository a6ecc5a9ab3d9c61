"""A small decoder-only transformer with random weights whose attention is a varlen eager break.

The model is built in code (RMSNorm, fused QKV, causal attention, SwiGLU MLP, tied LM head).
Attention is an eager break per layer in two forms. The syncing one reads the sequence boundaries
from the device (``cu_lens.tolist()``) and runs one causal SDPA per sequence. The non-syncing one
reads boundaries the host prepared before the replay (``HostLengths``, as vLLM builds attention
metadata on the host), so the break launches work without waiting for the GPU; it runs one SDPA
per run of equal-length sequences. The full-graph variant uses batched SDPA over equal lengths.
Each variant's forward is timed at every batch size and reported as tokens per second, with the
GPU idle time per break from a profiled replay of each library variant.
"""

from __future__ import annotations

import functools
import itertools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Config:
    layers: int = 4
    d_model: int = 512
    heads: int = 8
    ffn: int = 1408
    vocab: int = 8192
    seq_len: int = 128
    dtype: torch.dtype = torch.bfloat16


class TinyDecoder:
    """Weights as plain tensors; ``forward(tokens, cu_lens, attention)`` returns last-token logits."""

    def __init__(self, cfg: Config, device: str, seed: int = 0) -> None:
        gen = torch.Generator(device="cpu").manual_seed(seed)

        def w(*shape: int) -> torch.Tensor:
            scale = shape[0] ** -0.5
            return (torch.randn(*shape, generator=gen) * scale).to(device, cfg.dtype)

        self.cfg = cfg
        self.embed = w(cfg.vocab, cfg.d_model)
        self.layers = [
            {
                "norm1": torch.ones(cfg.d_model, device=device, dtype=cfg.dtype),
                "wqkv": w(cfg.d_model, 3 * cfg.d_model),
                "wo": w(cfg.d_model, cfg.d_model),
                "norm2": torch.ones(cfg.d_model, device=device, dtype=cfg.dtype),
                "w_gate_up": w(cfg.d_model, 2 * cfg.ffn),
                "w_down": w(cfg.ffn, cfg.d_model),
            }
            for _ in range(cfg.layers)
        ]
        self.norm = torch.ones(cfg.d_model, device=device, dtype=cfg.dtype)

    def forward(
        self,
        tokens: torch.Tensor,
        cu_lens: torch.Tensor,
        attention: Callable[..., None],
        attention_lengths: Any = None,
    ) -> torch.Tensor:
        """``attention(q, k, v, attention_lengths, out)`` per layer; ``attention_lengths`` is
        ``cu_lens`` unless given (the non-syncing break takes ``HostLengths``)."""
        cfg = self.cfg
        lengths = cu_lens if attention_lengths is None else attention_lengths
        heads, head_dim = cfg.heads, cfg.d_model // cfg.heads
        h = self.embed[tokens]
        for layer in self.layers:
            x = F.rms_norm(h, (cfg.d_model,), layer["norm1"])
            q, k, v = (x @ layer["wqkv"]).view(-1, 3, heads, head_dim).unbind(1)
            out = torch.empty_like(q)
            attention(q, k, v, lengths, out)
            h = h + out.view(-1, cfg.d_model) @ layer["wo"]
            x = F.rms_norm(h, (cfg.d_model,), layer["norm2"])
            gate, up = (x @ layer["w_gate_up"]).chunk(2, dim=-1)
            h = h + (F.silu(gate) * up) @ layer["w_down"]
        last = F.rms_norm(h[cu_lens[1:] - 1], (cfg.d_model,), self.norm)
        return last @ self.embed.T


def varlen_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_lens: torch.Tensor, out: torch.Tensor
) -> None:
    """Causal attention per sequence; the boundaries are read on the host (not capturable)."""
    bounds = cu_lens.tolist()
    for start, end in itertools.pairwise(bounds):
        o = F.scaled_dot_product_attention(
            q[start:end].transpose(0, 1),
            k[start:end].transpose(0, 1),
            v[start:end].transpose(0, 1),
            is_causal=True,
        )
        out[start:end] = o.transpose(0, 1)


class HostLengths:
    """Sequence boundaries the host sets before each replay; breaks read them with no sync."""

    def __init__(self, bounds: list[int]) -> None:
        self.bounds = list(bounds)


def _equal_length_runs(bounds: list[int]) -> list[tuple[int, int, int]]:
    """(start, end, sequences) for each maximal run of consecutive equal-length sequences."""
    runs: list[tuple[int, int, int]] = []
    for start, end in itertools.pairwise(bounds):
        if runs and end - start == (runs[-1][1] - runs[-1][0]) // runs[-1][2]:
            first, _, n = runs[-1]
            runs[-1] = (first, end, n + 1)
        else:
            runs.append((start, end, 1))
    return runs


def host_varlen_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: HostLengths, out: torch.Tensor
) -> None:
    """Causal attention over host-known boundaries: one SDPA per run of equal-length sequences,
    launched without reading anything from the device."""
    for start, end, n in _equal_length_runs(lengths.bounds):

        def grouped(t: torch.Tensor, start: int = start, end: int = end, n: int = n):
            return t[start:end].view(n, (end - start) // n, *t.shape[1:]).transpose(1, 2)

        o = F.scaled_dot_product_attention(grouped(q), grouped(k), grouped(v), is_causal=True)
        grouped(out).copy_(o)


def make_dense_attention(batch: int, seq_len: int) -> Callable[..., None]:
    """Batched causal attention for equal lengths: capturable, no host read."""

    def dense_attention(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_lens: torch.Tensor, out: torch.Tensor
    ) -> None:
        def heads_first(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, seq_len, *t.shape[1:]).transpose(1, 2)

        o = F.scaled_dot_product_attention(
            heads_first(q), heads_first(k), heads_first(v), is_causal=True
        )
        out.view(batch, seq_len, *out.shape[1:]).copy_(o.transpose(1, 2))

    return dense_attention


def _synced_times(fn: Callable[[], Any], n: int) -> list[float]:
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return times


def gpu_idle_per_break(replay: Callable[[], Any], breaks: int) -> float:
    """Idle time of the GPU inside one profiled replay (span minus kernel busy), per break."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        replay()
        torch.cuda.synchronize()
    spans = sorted(
        (e.time_range.start, e.time_range.end)
        for e in prof.events()
        if e.device_type == DeviceType.CUDA
    )
    busy, cur_start, cur_end = 0.0, *spans[0]
    for start, end in spans[1:]:
        if start > cur_end:
            busy += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    busy += cur_end - cur_start
    span = spans[-1][1] - spans[0][0]
    return (span - busy) * 1e-6 / breaks


def _prepare_and_replay(host: HostLengths, seq_lens: list[int], capture: Any) -> None:
    """One non-syncing forward: the host prepares this step's boundaries, then the replay's
    breaks read them."""
    host.bounds = [0, *itertools.accumulate(seq_lens)]
    capture.replay()


def run(
    device: str,
    batches: tuple[int, ...],
    cfg: Config,
    rounds: int,
    n: int,
    profile_gpu: bool,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Tokens per second of eager, the library and one full graph at every batch size, each
    attention break syncing (``eager``, ``library``) and not (``eager_nosync``,
    ``library_nosync``: boundaries prepared on the host before every forward)."""
    import breakable_cudagraph as bcg

    model = TinyDecoder(cfg, device)
    attention_break = bcg.eager_break_during_capture(varlen_attention)
    host_break = bcg.eager_break_during_capture(host_varlen_attention)
    rows = []
    for batch in batches:
        tokens = torch.randint(0, cfg.vocab, (batch * cfg.seq_len,), device=device)
        cu_lens = torch.arange(0, batch + 1, device=device, dtype=torch.int32) * cfg.seq_len
        dense = make_dense_attention(batch, cfg.seq_len)
        seq_lens = [cfg.seq_len] * batch  # what a scheduler knows on the host
        host = HostLengths([0, *itertools.accumulate(seq_lens)])
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up on the capture stream
            expected = model.forward(tokens, cu_lens, varlen_attention)
            model.forward(tokens, cu_lens, dense)
            model.forward(tokens, cu_lens, host_varlen_attention, host)
        torch.cuda.current_stream().wait_stream(side)
        capture = bcg.BreakableCUDAGraphCapture()
        with capture:
            lib_out = model.forward(tokens, cu_lens, attention_break)
        capture_nosync = bcg.BreakableCUDAGraphCapture()
        with capture_nosync:
            nosync_out = model.forward(tokens, cu_lens, host_break, host)

        replay_nosync = functools.partial(_prepare_and_replay, host, seq_lens, capture_nosync)

        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            graph_out = model.forward(tokens, cu_lens, dense)
        variants: dict[str, Callable[[], Any]] = {
            "eager": functools.partial(model.forward, tokens, cu_lens, varlen_attention),
            "library": capture.replay,
            "full_graph": graph.replay,
            "eager_nosync": functools.partial(
                model.forward, tokens, cu_lens, host_varlen_attention, host
            ),
            "library_nosync": replay_nosync,
        }
        samples: dict[str, list[float]] = {name: [] for name in variants}
        names = tuple(variants)
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                samples[name] += _synced_times(variants[name], n)
        row: dict[str, Any] = {"batch": batch, "tokens": batch * cfg.seq_len}
        for name in names:
            seconds = statistics.median(samples[name])
            row[f"{name}_s"] = seconds
            row[f"{name}_tokens_per_s"] = batch * cfg.seq_len / seconds
        row["library_correct"] = bool(torch.allclose(lib_out, expected, rtol=2e-2, atol=2e-2))
        row["library_nosync_correct"] = bool(
            torch.allclose(nosync_out, expected, rtol=2e-2, atol=2e-2)
        )
        row["full_graph_correct"] = bool(torch.allclose(graph_out, expected, rtol=5e-2, atol=5e-2))
        row["breaks"] = capture.num_eager_breaks
        row["gpu_idle_per_break_s"] = (
            gpu_idle_per_break(capture.replay, capture.num_eager_breaks) if profile_gpu else None
        )
        row["nosync_gpu_idle_per_break_s"] = (
            gpu_idle_per_break(replay_nosync, capture_nosync.num_eager_breaks)
            if profile_gpu
            else None
        )
        log(
            f"batch={batch}: "
            + ", ".join(f"{name} {row[f'{name}_tokens_per_s']:.0f} tok/s" for name in names)
        )
        rows.append(row)
        capture.reset()
        capture_nosync.reset()
        graph.reset()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return {"config": {**cfg.__dict__, "dtype": str(cfg.dtype)}, "rows": rows}
