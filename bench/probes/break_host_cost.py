"""GPU probe: what is left between the non-syncing transformer and one full graph (issue 23).

``python -m bench``'s transformer with breaks that do not sync stays 1.6x to 4.6x slower per
forward than one full graph at batch 1 to 32 on the H200, with 200 to 300 us of GPU idle per
break. This probe splits a replay's time at batch 1 to 64: the host time of one eager
attention break called alone (the SDPA call and its views, no sync), the library's own cost
per break (a replay whose breaks do nothing, against one full graph of the same body), and
the GPU time of one full graph; then the replay under ``torch.profiler`` with the CPU time of
the ops run inside breaks. One JSON line per batch.
Run on a GPU machine: ``python -m bench.probes.break_host_cost``.
"""

from __future__ import annotations

import itertools
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

import breakable_cudagraph as bcg
from bench.transformer import (
    Config,
    HostLengths,
    TinyDecoder,
    _synced_times,
    host_varlen_attention,
)


def _host_us(fn: Callable[[], Any], n: int = 200) -> float:
    """Median host time of ``fn`` alone, the GPU drained before each call and not after."""
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6


def _synced_us(fn: Callable[[], Any], n: int = 200) -> float:
    return statistics.median(_synced_times(fn, n)) * 1e6


def _noop_attention(q, k, v, lengths, out) -> None:
    pass


def measure(batch: int, cfg: Config) -> dict[str, Any]:
    model = TinyDecoder(cfg, "cuda")
    tokens = torch.randint(0, cfg.vocab, (batch * cfg.seq_len,), device="cuda")
    cu_lens = torch.arange(0, batch + 1, device="cuda", dtype=torch.int32) * cfg.seq_len
    host = HostLengths([0, *itertools.accumulate([cfg.seq_len] * batch)])
    heads = cfg.heads
    shape = (batch * cfg.seq_len, heads, cfg.d_model // heads)
    q, k, v, out = (torch.randn(shape, device="cuda", dtype=cfg.dtype) for _ in range(4))
    row: dict[str, Any] = {"batch": batch}
    row["break_alone_host_us"] = _host_us(lambda: host_varlen_attention(q, k, v, host, out))
    row["break_alone_synced_us"] = _synced_us(lambda: host_varlen_attention(q, k, v, host, out))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        model.forward(tokens, cu_lens, host_varlen_attention, host)
        model.forward(tokens, cu_lens, _noop_attention, host)
    torch.cuda.current_stream().wait_stream(side)
    real = bcg.BreakableCUDAGraphCapture()
    with real:
        model.forward(tokens, cu_lens, bcg.eager_break_during_capture(host_varlen_attention), host)
    empty = bcg.BreakableCUDAGraphCapture()
    with empty:
        model.forward(tokens, cu_lens, bcg.eager_break_during_capture(_noop_attention), host)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        model.forward(tokens, cu_lens, _noop_attention, host)
    row["breaks"] = real.num_eager_breaks
    row["replay_real_breaks_us"] = _synced_us(real.replay)
    row["replay_empty_breaks_us"] = _synced_us(empty.replay)
    row["full_graph_no_attention_us"] = _synced_us(graph.replay)
    row["library_cost_per_break_us"] = (
        row["replay_empty_breaks_us"] - row["full_graph_no_attention_us"]
    ) / max(real.num_eager_breaks, 1)

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        real.replay()
        torch.cuda.synchronize()
    events = prof.key_averages()
    row["profiled_cpu_us"] = {
        e.key: round(e.cpu_time_total, 1)
        for e in sorted(events, key=lambda e: -e.cpu_time_total)[:8]
    }
    real.reset()
    empty.reset()
    graph.reset()
    return row


def main() -> None:
    cfg = Config()
    print(json.dumps({"torch": torch.__version__, "gpu": torch.cuda.get_device_name()}))
    for batch in (1, 8, 64):
        print(json.dumps(measure(batch, cfg)), flush=True)


if __name__ == "__main__":
    main()
