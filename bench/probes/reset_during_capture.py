"""GPU probe: freeing an earlier graph while another stream capture is open.

Python's cyclic collector can free a ``CUDAGraph`` at any allocation, also while a capture
runs; its destructor resets the graph. Under ``pytest -n auto`` on the H200 that printed
"operation not permitted when stream is capturing (function reset)" and the open capture's
``capture_end`` then failed. Each scenario runs in a fresh child process and prints one JSON
line: the capture mode, how the old graph is freed (``reset()`` or dropped and collected),
and what ``capture_end``, a replay of the new graph and a later capture did. Run on a GPU
machine: ``python -m bench.probes.reset_during_capture``.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import torch

MODES = ("global", "thread_local", "relaxed")
FREES = ("reset", "collect")


def _outcome(fn) -> str:
    try:
        fn()
        return "ok"
    except Exception as error:  # a probe reports every outcome
        return f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"


def scenario(mode: str, free: str) -> dict[str, str]:
    x = torch.ones(1024, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        old = torch.cuda.CUDAGraph()
        old.capture_begin()
        x * 2
        old.capture_end()
        holder = [old]
        holder.append(holder)  # a cycle: only the collector frees it
        del old
        new = torch.cuda.CUDAGraph()
        new.capture_begin(capture_error_mode=mode)
        y = x + 1
        if free == "reset":
            freed = _outcome(holder[0].reset)
        else:
            del holder
            freed = _outcome(gc.collect)
        box: list[torch.Tensor] = []
        after = _outcome(lambda: box.append(y * 3))
        end = _outcome(new.capture_end)
    z = box[0] if box else None
    _outcome(lambda: torch.cuda.current_stream().wait_stream(side))
    replay = _outcome(new.replay) if end == "ok" else "not tried"
    _outcome(torch.cuda.synchronize)
    right = (
        str(bool(torch.equal(z, torch.full_like(x, 6.0))))
        if replay == "ok" and z is not None
        else "-"
    )

    def later() -> None:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(side):
            graph.capture_begin()
            x * 5
            graph.capture_end()
        graph.replay()

    return {"mode": mode, "free": free, "free_call": freed, "next_op": after,
            "capture_end": end, "replay": replay,
            "replay_right": right, "later_capture": _outcome(later)}  # fmt: skip


def main() -> None:
    if len(sys.argv) == 3:
        print(json.dumps(scenario(sys.argv[1], sys.argv[2])))
        return
    for mode in MODES:
        for free in FREES:
            done = subprocess.run(
                [sys.executable, "-m", "bench.probes.reset_during_capture", mode, free],
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            line = done.stdout.strip().splitlines()[-1:] or [
                f'{{"mode": "{mode}", "free": "{free}", "rc": {done.returncode}}}'
            ]
            print(line[0])
            warnings = [w for w in done.stderr.splitlines() if "Warning" in w]
            if warnings:
                print("   stderr:", warnings[0][:200])


if __name__ == "__main__":
    main()
