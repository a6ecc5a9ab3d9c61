"""GPU probe: what a failed or released capture leaves in torch's allocators.

Each scenario runs in a fresh child process and prints one JSON line: whether the next
``capture_begin`` into the same pool works, after which cleanup. Run on a GPU machine:
``python -m bench.probes.pool_recovery``. The answers decide what the library's abort path
and the faults property may expect (issue 11).
"""

from __future__ import annotations

import json
import subprocess
import sys

import torch


def _capture(graph: torch.cuda.CUDAGraph, pool, body) -> None:
    graph.capture_begin(pool=pool)
    try:
        body()
    finally:
        graph.capture_end()


def _try(what: str, fn) -> str:
    try:
        fn()
        return "ok"
    except Exception as error:  # a probe reports every outcome
        return f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"


def scenario(name: str) -> dict:
    x = torch.ones(1024, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    pool = torch.cuda.graph_pool_handle()
    report: dict = {"scenario": name}
    keep = []
    with torch.cuda.stream(side):
        if name.startswith("anchored"):
            anchor = torch.cuda.CUDAGraph()
            _capture(anchor, pool, lambda: keep.append(x * 3))
            keep.append(anchor)
        failed = torch.cuda.CUDAGraph()
        failed.capture_begin(pool=pool)
        y = x * 2  # allocated in the pool during the failed capture
        illegal = {"sync": torch.cuda.synchronize, "item": lambda: y.sum().item()}
        kind = "item" if "item" in name else "sync"
        if "raise" in name:
            report["body"] = "python raise"
            report["capture_end"] = _try("end", failed.capture_end)
        else:
            report["illegal"] = _try(kind, illegal[kind])
            report["capture_end"] = _try("end", failed.capture_end)
        if "endalloc" in name:
            report["endAllocateToPool"] = _try(
                "endalloc", lambda: torch._C._cuda_endAllocateToPool(x.device.index, pool)
            )
        if "reset" in name:
            report["reset"] = _try("reset", failed.reset)
        if "dropy" in name:
            del y
        if "emptycache" in name:
            report["empty_cache"] = _try("empty", torch.cuda.empty_cache)
        report["is_capturing"] = torch.cuda.is_current_stream_capturing()
        again = torch.cuda.CUDAGraph()
        z: list = []
        report["next_capture"] = _try(
            "next", lambda: _capture(again, pool, lambda: z.append(x + 1))
        )
        if report["next_capture"] == "ok":
            x.fill_(5)
            again.replay()
            torch.cuda.synchronize()
            report["next_replay_correct"] = bool(torch.equal(z[0], torch.full_like(x, 6)))
        fresh = torch.cuda.CUDAGraph()
        report["capture_new_pool"] = _try(
            "fresh", lambda: _capture(fresh, torch.cuda.graph_pool_handle(), lambda: x + 2)
        )
    return report


SCENARIOS = [
    "sync",
    "sync-endalloc",
    "item-endalloc",
    "sync-endalloc-reset",
    "sync-endalloc-reset-dropy-emptycache",
    "anchored-sync",
    "anchored-sync-endalloc",
    "anchored-item-endalloc",
    "anchored-sync-endalloc-reset-dropy-emptycache",
    "raise",
    "raise-reset",
    "raise-reset-emptycache",
    "raise-reset-dropy-emptycache",
    "anchored-raise-reset",
]


def main() -> None:
    if len(sys.argv) > 1:
        print(json.dumps(scenario(sys.argv[1])))
        return
    print(
        json.dumps(
            {
                "torch": torch.__version__,
                "cuda": torch.version.cuda,
                "pool_bindings": sorted(n for n in dir(torch._C) if "ool" in n or "Host" in n),
            }
        )
    )
    for name in SCENARIOS:
        done = subprocess.run(
            [sys.executable, "-m", "bench.probes.pool_recovery", name],
            capture_output=True,
            text=True,
            timeout=60,
        )
        line = done.stdout.strip().splitlines()[-1:] or [""]
        print(
            line[0]
            if done.returncode == 0
            else json.dumps({"scenario": name, "rc": done.returncode, "stderr": done.stderr[-600:]})
        )


if __name__ == "__main__":
    main()
