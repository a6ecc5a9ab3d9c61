"""GPU probe: can one instantiated graph serve a segment at several batch sizes?

SGLang shares one executable between structurally identical segments of different sizes and
switches it with ``cudaGraphExecUpdate``. Whether that pays for a capture set depends on three
numbers this probe measures on one Llama-shaped segment (o_proj, residual, RMSNorm, SwiGLU MLP,
residual, RMSNorm, fused QKV: the ops between two attention breaks, hidden 1024, bf16):

* how many groups the 67 sizes of an engine's sweep fall into when segments are keyed on the
  kernel functions they launch (cuBLAS picks kernels per shape, so a group spans few sizes);
* the device memory of one executable (``mem_get_info`` around instantiation);
* the time of one switch (``cudaGraphExecUpdate``) against the segment's replay, and whether a
  switched executable's output equals the size's own executable bit for bit.

``python -m bench.probes.graph_exec_update [--out DIR]``: prints a JSON summary and writes
``graph_exec_update.json`` to ``--out`` (default ``$OUT``). Needs ``cuda-bindings``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

SIZES = (1, 2, 4, *range(8, 513, 8))
HIDDEN, INTER = 1024, 2816


def _segment(weights: dict[str, torch.Tensor], x: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
    h = x @ weights["o"] + res
    n = F.rms_norm(h, (HIDDEN,))
    gate, up = (n @ weights["gate_up"]).chunk(2, dim=-1)
    h = (F.silu(gate) * up) @ weights["down"] + h
    return F.rms_norm(h, (HIDDEN,)) @ weights["qkv"]


def _kernel_functions(graph_handle: int, cudart) -> tuple[int, ...]:
    from cuda.bindings import driver

    graph = cudart.cudaGraph_t(init_value=graph_handle)
    _, _, count = cudart.cudaGraphGetNodes(graph, 0)
    _, nodes, count = cudart.cudaGraphGetNodes(graph, count)
    funcs = []
    for node in nodes:
        _, kind = cudart.cudaGraphNodeGetType(node)
        if kind == cudart.cudaGraphNodeType.cudaGraphNodeTypeKernel:
            _, params = cudart.cudaGraphKernelNodeGetParams(node)
            if params is None:  # a kernel launched through the driver API (cuBLAS's)
                _, params = driver.cuGraphKernelNodeGetParams(driver.CUgraphNode(int(node)))
            funcs.append(int(params.func) if params is not None else 0)
        else:
            funcs.append(-int(kind))
    return tuple(funcs)


def _median_us(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    from cuda.bindings import runtime as cudart

    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    weights = {
        "o": torch.randn(HIDDEN, HIDDEN, device=dev, dtype=dt) / 32,
        "gate_up": torch.randn(HIDDEN, 2 * INTER, device=dev, dtype=dt) / 32,
        "down": torch.randn(INTER, HIDDEN, device=dev, dtype=dt) / 53,
        "qkv": torch.randn(HIDDEN, 3 * HIDDEN, device=dev, dtype=dt) / 32,
    }
    big = max(SIZES)
    x_buf = torch.randn(big, HIDDEN, device=dev, dtype=dt)
    res_buf = torch.randn(big, HIDDEN, device=dev, dtype=dt)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for size in SIZES:  # warm: kernels and cuBLAS workspaces exist before capture
            _segment(weights, x_buf[:size], res_buf[:size])
    torch.cuda.synchronize()
    pool = torch.cuda.graph_pool_handle()
    graphs: dict[int, torch.cuda.CUDAGraph] = {}
    outs: dict[int, torch.Tensor] = {}
    exec_bytes = []
    for size in sorted(SIZES, reverse=True):
        graph = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.stream(stream):
            graph.capture_begin(pool=pool)
            outs[size] = _segment(weights, x_buf[:size], res_buf[:size])
            graph.capture_end()
        torch.cuda.synchronize()
        reserved, free = torch.cuda.memory_reserved(), torch.cuda.mem_get_info()[0]
        graph.instantiate()
        torch.cuda.synchronize()
        exec_bytes.append(
            free - torch.cuda.mem_get_info()[0] - (torch.cuda.memory_reserved() - reserved)
        )
        graphs[size] = graph
    signatures = {size: _kernel_functions(g.raw_cuda_graph(), cudart) for size, g in graphs.items()}
    groups: dict[tuple[int, ...], list[int]] = {}
    for size in SIZES:
        groups.setdefault(signatures[size], []).append(size)
    # Switch each size's graph into the executable of the largest size of its group, and back.
    accepted = rejected = equal = 0
    update_us, replay_us = [], []
    for members in groups.values():
        owner = max(members)
        exe = cudart.cudaGraphExec_t(init_value=graphs[owner].raw_cuda_graph_exec())
        for size in members:
            if size == owner:
                continue
            graphs[size].replay()
            torch.cuda.synchronize()
            expected = outs[size].clone()
            outs[size].zero_()
            target = cudart.cudaGraph_t(init_value=graphs[size].raw_cuda_graph())
            t0 = time.perf_counter()
            err, info = cudart.cudaGraphExecUpdate(exe, target)
            update_us.append((time.perf_counter() - t0) * 1e6)
            if err != cudart.cudaError_t.cudaSuccess:
                rejected += 1
                continue
            accepted += 1
            graphs[owner].replay()
            torch.cuda.synchronize()
            equal += bool(torch.equal(outs[size], expected))
            back = cudart.cudaGraph_t(init_value=graphs[owner].raw_cuda_graph())
            cudart.cudaGraphExecUpdate(exe, back)
    # Any size into the largest size's executable: kernel functions may differ (CUDA 12 allows
    # a node's function to change within one context), topology may not.
    exe_big = cudart.cudaGraphExec_t(init_value=graphs[big].raw_cuda_graph_exec())
    back_big = cudart.cudaGraph_t(init_value=graphs[big].raw_cuda_graph())
    cross = {"accepted": 0, "rejected": 0, "bitwise_equal": 0, "reasons": {}}
    for size in SIZES:
        if size == big:
            continue
        graphs[size].replay()
        torch.cuda.synchronize()
        expected = outs[size].clone()
        outs[size].zero_()
        err, info = cudart.cudaGraphExecUpdate(
            exe_big, cudart.cudaGraph_t(init_value=graphs[size].raw_cuda_graph())
        )
        if err != cudart.cudaError_t.cudaSuccess:
            cross["rejected"] += 1
            reason = str(getattr(info, "result", err))
            cross["reasons"][reason] = cross["reasons"].get(reason, 0) + 1
            continue
        cross["accepted"] += 1
        graphs[big].replay()
        torch.cuda.synchronize()
        cross["bitwise_equal"] += bool(torch.equal(outs[size], expected))
        cudart.cudaGraphExecUpdate(exe_big, back_big)
    for size in (1, 8, 64):
        replay_us.append(_median_us(graphs[size].replay, args.repeats))
    summary = {
        "sizes": len(SIZES),
        "kernel_nodes_per_segment": len(signatures[big]),
        "signature_groups": len(groups),
        "group_sizes": sorted((len(m) for m in groups.values()), reverse=True),
        "exec_bytes_median": statistics.median(exec_bytes),
        "exec_bytes_total": sum(exec_bytes),
        "updates_accepted": accepted,
        "updates_rejected": rejected,
        "switched_outputs_bitwise_equal": equal,
        "update_us_median": statistics.median(update_us) if update_us else None,
        "segment_replay_us_at_1_8_64": replay_us,
        "any_size_into_largest": cross,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
    }
    print(json.dumps(summary), flush=True)
    out = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "graph_exec_update.json").write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
