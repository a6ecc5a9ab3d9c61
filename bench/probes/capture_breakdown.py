"""GPU probe: where a capture set's sweep spends its time, against the minimal implementation.

The sweep is ``bench.capture_sweep``'s (8 layers by default, the 67 sizes). Each variant runs in
a fresh process, the order rotated every round, after one unmeasured process that takes the
machine's first-use costs. Wrappers add up the time inside ``CUDAGraph.capture_begin`` and
``capture_end`` and inside the library's holding of break arguments, and count the non-owning
aliases made. Variants:

* ``capture_set``: ``breakable_cudagraph.CaptureSet`` as it is;
* ``strong``: the same with every break argument held strongly (no aliases: the minimal
  implementation's memory, to price the aliasing);
* ``own_storage``: every alias made over a borrowed storage of its own
  (``arguments.non_owning_alias``), as the library made them before its aliases became views
  of one tensor per storage;
* ``per_capture``: one ``BreakableCUDAGraphCapture`` per size into one pool, as vLLM's runner
  captures (``bench.capture_sweep``'s ``per_capture`` column);
* ``minimal``: ``bench.minimal.MinimalCapture``.

Every variant also reports the allocator snapshots taken (``torch.cuda.memory_snapshot``: how
the library answers whether an address lies in the pool) and their seconds. With ``--profile``
each process runs its sweep under cProfile and the rows carry its 40 costliest functions by
own time.

``python -m bench.probes.capture_breakdown [--rounds 4] [--variants capture_set,minimal]
[--layers 8] [--out DIR]``: a line per process, then the medians; writes
``capture_breakdown_<layers>.json`` to ``--out`` (default ``$OUT``, else the working folder).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ("capture_set", "strong", "own_storage", "per_capture", "minimal")


def _timed(owner: Any, name: str, totals: dict[str, float], key: str) -> None:
    """Wraps ``owner.name`` so that its calls add their seconds to ``totals[key]``."""
    inner = getattr(owner, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            totals[key] += time.perf_counter() - began

    setattr(owner, name, wrapped)


def measure(variant: str, layers: int, profile: bool = False) -> dict[str, Any]:
    import torch

    import breakable_cudagraph.arguments as arguments
    import breakable_cudagraph.capture as capture
    from bench import capture_sweep

    totals = {"begin": 0.0, "end": 0.0, "hold": 0.0, "aliases": 0.0, "snapshot": 0.0}
    snapshots = [0]
    taken = torch.cuda.memory_snapshot

    def snapshot(*args: Any, **kwargs: Any) -> Any:
        snapshots[0] += 1
        return taken(*args, **kwargs)

    torch.cuda.memory_snapshot = snapshot
    _timed(torch.cuda, "memory_snapshot", totals, "snapshot")
    if variant == "strong":
        arguments._construct_storage = None
    memory = arguments.PoolMemory
    made = memory.alias

    def counted(self: Any, tensor: torch.Tensor, key: tuple[Any, ...]) -> torch.Tensor:
        totals["aliases"] += key not in self.aliases
        if variant == "own_storage" and key not in self.aliases:
            self.aliases[key] = arguments.non_owning_alias(tensor)
        return made(self, tensor, key)

    memory.alias = counted
    _timed(torch.cuda.CUDAGraph, "capture_begin", totals, "begin")
    _timed(torch.cuda.CUDAGraph, "capture_end", totals, "end")
    _timed(capture, "hold_call_arguments", totals, "hold")
    column = variant if variant in ("minimal", "per_capture") else "capture_set"
    shape = capture_sweep.Shape(layers=layers)
    if not profile:
        row = capture_sweep.measure(column, shape, "cuda")
        return {**row, **totals, "snapshots": snapshots[0], "variant": variant}
    import cProfile
    import io
    import pstats

    sweeps = capture_sweep.SWEEPS
    profiler = cProfile.Profile()
    inner = sweeps[column]

    def profiled(*args: Any) -> Any:
        profiler.enable()
        try:
            return inner(*args)
        finally:
            profiler.disable()

    sweeps[column] = profiled
    row = capture_sweep.measure(column, shape, "cuda")
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(40)
    return {
        **row,
        **totals,
        "snapshots": snapshots[0],
        "variant": variant,
        "profile": text.getvalue(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--variants", default="capture_set,minimal")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--profile", action="store_true", help="cProfile each sweep")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("ROW " + json.dumps(measure(args.child, args.layers, args.profile)))
        return 0
    variants = args.variants.split(",")
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    child = [sys.executable, "-m", "bench.probes.capture_breakdown", "--layers", str(args.layers)]
    child += ["--profile"] if args.profile else []
    subprocess.run([*child, "--child", "minimal"], cwd=ROOT, capture_output=True)  # first use
    rows = []
    for round_ in range(args.rounds):
        shift = round_ % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            done = subprocess.run(
                [*child, "--child", variant], cwd=ROOT, capture_output=True, text=True, timeout=300
            )
            found = [line for line in done.stdout.splitlines() if line.startswith("ROW ")]
            if not found:
                print(f"{variant}: no row: {done.stderr[-1500:]}")
                continue
            row = json.loads(found[0][4:])
            rows.append(row)
            print(
                f"round {round_} {variant}: capture {row['capture_s']:.3f} s, begin "
                f"{row['begin']:.3f}, end {row['end']:.3f}, holding {row['hold']:.3f}, "
                f"{row['aliases']:.0f} aliases, {row['snapshots']} snapshots "
                f"{row['snapshot']:.3f} s, pool {row['pool_bytes'] / 2**20:.0f} MiB",
                flush=True,
            )
    for variant in variants:
        mine = [row for row in rows if row["variant"] == variant]
        if mine:
            medians = {
                key: statistics.median(row[key] for row in mine)
                for key in ("capture_s", "begin", "end", "hold", "snapshot")
            }
            print(f"median {variant} of {len(mine)}: " + json.dumps(medians))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"capture_breakdown_{args.layers}.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
