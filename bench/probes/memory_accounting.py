"""GPU probe: what torch's CUDA caching allocator counts, for the simulator to match.

Each case runs in a fresh child process (a fresh allocator) and prints one JSON line:
``memory_allocated``/``memory_reserved`` growth of plain allocations around CUDA's 512-byte
rounding and its small (1 MiB), 10 MiB and 2 MiB-multiple segment sizes; the peak after
``reset_peak_memory_stats``; and the growth of captures with one 256 KiB output (the
first, a second while the first lives, after both are freed), with the blocks each
capture added (``memory_snapshot``). Run from the repository root:

    python -m bench.probes.memory_accounting            # on the GPU if torch sees one
    python -m bench.probes.memory_accounting --sim      # the same cases on the simulator

Lines go to stdout and to ``$OUT/memory_accounting[_sim].jsonl`` when ``OUT`` is set.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import subprocess
import sys
from typing import Any

import torch

KIB, MIB = 1 << 10, 1 << 20
PLAIN_SIZES = (1, 511, 512, 513, MIB, MIB + 1, 5 * MIB, 12 * MIB)
CASES = [
    *(f"plain_{n}" for n in PLAIN_SIZES),
    "two_small_share_a_segment",
    "peak_after_reset",
    "capture_256k",
    "capture_256k_shared_pool",
    "capture_empty_tensor_only",
    "capture_256k_then_reset",
    "capture_begin_on_the_default_stream",
]


def _counters() -> dict[str, int]:
    return {
        "allocated": torch.cuda.memory_allocated(),
        "reserved": torch.cuda.memory_reserved(),
        "peak": torch.cuda.max_memory_allocated(),
    }


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {key: after[key] - before[key] for key in before}


def _blocks() -> list[tuple[Any, int, int]]:
    """(pool id, block size, allocated?) of every block: torch's snapshot has segments
    holding blocks, the simulator's a flat list of blocks."""
    found = []
    for entry in torch.cuda.memory_snapshot():
        pool = tuple(entry.get("segment_pool_id", (0, 0)))
        if "blocks" in entry:
            for block in entry["blocks"]:
                found.append((pool, block["size"], int(block["state"] == "active_allocated")))
        else:
            found.append((pool, entry["total_size"], int(entry["allocated_size"] > 0)))
    return sorted(found)


def _added(before: list, after: list) -> list:
    remaining = list(before)
    added = []
    for block in after:
        if block in remaining:
            remaining.remove(block)
        else:
            added.append(block)
    return added


def _side_stream() -> torch.cuda.Stream:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    return side


def _capture_one_output(pool: Any = None, numel: int = 64 * KIB) -> tuple[Any, Any, dict]:
    """Captures a graph whose only allocation is a float32 output of ``numel`` elements."""
    x = torch.ones(numel, device="cuda")
    x.mul_(2)  # warm the kernel eagerly
    torch.cuda.synchronize()
    before, blocks = _counters(), _blocks()
    graph = torch.cuda.CUDAGraph()
    side = _side_stream()
    with torch.cuda.stream(side):
        graph.capture_begin(pool=pool)
        begun = _counters()
        out = x * 2 if numel else torch.empty(0, device="cuda")
        graph.capture_end()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    after = _counters()
    report = {
        "at_capture_begin": _delta(before, begun),
        "growth": _delta(before, after),
        "blocks_added": _added(blocks, _blocks()),
    }
    return graph, (x, out), report


def run_case(name: str) -> dict[str, Any]:
    report: dict[str, Any] = {"case": name, "torch": torch.__version__}
    torch.cuda.empty_cache()
    if name.startswith("plain_"):
        nbytes = int(name.split("_")[1])
        before = _counters()
        t = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        report["growth"] = _delta(before, _counters())
        del t
        report["after_free"] = _delta(before, _counters())
        torch.cuda.empty_cache()
        report["after_empty_cache"] = _delta(before, _counters())
    elif name == "two_small_share_a_segment":
        before = _counters()
        a = torch.empty(1000, dtype=torch.uint8, device="cuda")
        report["first"] = _delta(before, _counters())
        b = torch.empty(3000, dtype=torch.uint8, device="cuda")
        report["both"] = _delta(before, _counters())
        del a, b
    elif name == "peak_after_reset":
        big = torch.empty(4 * MIB, dtype=torch.uint8, device="cuda")
        report["peak_with_4mib"] = torch.cuda.max_memory_allocated()
        del big
        report["peak_after_free"] = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        report["peak_after_reset"] = torch.cuda.max_memory_allocated()
        report["allocated_after_reset"] = torch.cuda.memory_allocated()
        small = torch.empty(MIB, dtype=torch.uint8, device="cuda")
        report["peak_with_1mib"] = torch.cuda.max_memory_allocated()
        del small
        report["peak_after_second_free"] = torch.cuda.max_memory_allocated()
    elif name in ("capture_256k", "capture_256k_shared_pool", "capture_empty_tensor_only"):
        pool = torch.cuda.graph_pool_handle() if name.endswith("shared_pool") else None
        numel = 0 if name == "capture_empty_tensor_only" else 64 * KIB
        before = _counters()
        first, keep_first, report["first"] = _capture_one_output(pool, numel)
        second, keep_second, report["second_while_first_lives"] = _capture_one_output(pool, numel)
        del first, keep_first
        gc.collect()
        report["after_first_freed"] = _delta(before, _counters())
        del second, keep_second
        gc.collect()
        report["after_both_freed"] = _delta(before, _counters())
        torch.cuda.empty_cache()
        report["after_empty_cache"] = _delta(before, _counters())
    elif name == "capture_256k_then_reset":
        before = _counters()
        graph, keep, report["capture"] = _capture_one_output()
        graph.reset()
        del keep
        gc.collect()
        report["after_reset_and_outputs_freed"] = _delta(before, _counters())
        del graph
        gc.collect()
        report["after_graph_freed"] = _delta(before, _counters())
    elif name == "capture_begin_on_the_default_stream":
        before = _counters()
        graph = torch.cuda.CUDAGraph()
        try:
            graph.capture_begin()
            report["capture_begin"] = "ok"
        except RuntimeError as error:
            report["capture_begin"] = str(error).splitlines()[0][:120]
        report["after_failed_begin"] = _delta(before, _counters())
        del graph
        gc.collect()
        report["after_graph_freed"] = _delta(before, _counters())
    return report


def _run_child(name: str, sim: bool) -> dict[str, Any]:
    if sim:
        from verification.sim import simulated_cuda

        context: Any = simulated_cuda()
    else:
        context = contextlib.nullcontext()
    with context:
        return run_case(name)


def main(argv: list[str]) -> int:
    sim = "--sim" in argv
    if "--case" in argv:
        print(json.dumps(_run_child(argv[argv.index("--case") + 1], sim)))
        return 0
    if not sim and not torch.cuda.is_available():
        print("no GPU: run with --sim for the simulator's figures", file=sys.stderr)
        return 2
    out_dir = os.environ.get("OUT")
    lines = []
    for name in CASES:
        command = [sys.executable, "-m", "bench.probes.memory_accounting", "--case", name]
        done = subprocess.run(
            command + (["--sim"] if sim else []), capture_output=True, text=True, timeout=120
        )
        line = done.stdout.strip().splitlines()[-1] if done.returncode == 0 else None
        if line is None:
            line = json.dumps({"case": name, "error": done.stderr.strip()[-600:]})
        print(line, flush=True)
        lines.append(line)
    if out_dir:
        suffix = "_sim" if sim else ""
        with open(os.path.join(out_dir, f"memory_accounting{suffix}.jsonl"), "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
