"""GPU probe: device memory of an instantiated CUDA graph, as a function of its kernel count.

A breakable sweep instantiates one graph per segment per batch size (9 per size for 8 layers),
where a full graph per size instantiates one. Whether their device memory is a fixed cost per
executable or a cost per kernel node decides whether sharing executables between sizes is
the lever on graph memory. For each kernel count, ``--graphs`` graphs of that many one-kernel
ops are captured into one pool and the device memory they take beyond the pool
(``mem_get_info`` delta minus ``memory_reserved`` delta) is divided by their number.

``python -m bench.probes.graph_exec_memory [--graphs 64] [--out DIR]``: prints one JSON line
per kernel count and writes ``graph_exec_memory.json`` to ``--out`` (default ``$OUT``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
from pathlib import Path

import torch

KERNELS = (1, 4, 16, 64, 256)


def bytes_per_graph(kernels: int, graphs: int, stream: torch.cuda.Stream) -> dict[str, float]:
    x = torch.zeros(1024, device="cuda")
    with torch.cuda.stream(stream):
        x.add_(1.0)  # the kernel, warm
    torch.cuda.synchronize()
    gc.collect()
    reserved, free = torch.cuda.memory_reserved(), torch.cuda.mem_get_info()[0]
    pool = torch.cuda.graph_pool_handle()
    kept = []
    with torch.cuda.stream(stream):
        for _ in range(graphs):
            graph = torch.cuda.CUDAGraph()
            graph.capture_begin(pool=pool)
            for _ in range(kernels):
                x.add_(1.0)
            graph.capture_end()
            kept.append(graph)
    torch.cuda.synchronize()
    pool_bytes = torch.cuda.memory_reserved() - reserved
    beyond = free - torch.cuda.mem_get_info()[0] - pool_bytes
    for graph in kept:
        graph.reset()
    return {
        "kernels": kernels,
        "graphs": graphs,
        "beyond_pool_bytes_per_graph": beyond / graphs,
        "pool_bytes": pool_bytes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", type=int, default=64)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    stream = torch.cuda.Stream()
    rows = []
    for kernels in KERNELS:
        row = bytes_per_graph(kernels, args.graphs, stream)
        print(json.dumps(row), flush=True)
        rows.append(row)
    out = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "graph_exec_memory.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
