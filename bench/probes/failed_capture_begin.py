"""GPU probe: destroying a CUDAGraph whose capture_begin raised.

A target whose nested capture calls ``capture_begin`` on a stream that is already capturing
gets an exception, and keeps a ``CUDAGraph`` whose begin failed. Under ``pytest -n auto`` on
the H200 a worker holding three such graphs until exit aborted in ``Py_FinalizeEx``:
"terminate called ... The graph should be registered to the state" (from
``~CUDAGraph`` -> ``CUDAGeneratorState::unregister_graph``). Each scenario runs in a fresh
child process and prints one JSON line: how ``capture_begin`` failed, and whether the process
survived freeing the graph at each point. Run on a GPU machine:
``python -m bench.probes.failed_capture_begin``.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import torch

WHEN = ("during_outer", "after_outer", "at_exit")
HOW = ("same_stream", "other_stream_global")


def scenario(how: str, when: str) -> None:
    x = torch.ones(1024, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    record: dict[str, str] = {"how": how, "when": when}
    with torch.cuda.stream(side):
        outer = torch.cuda.CUDAGraph()
        outer.capture_begin()
        x * 2
        inner = torch.cuda.CUDAGraph()
        other = torch.cuda.Stream() if how == "other_stream_global" else side
        try:
            with torch.cuda.stream(other):
                inner.capture_begin()
            record["begin"] = "ok"
        except Exception as error:  # a probe reports every outcome
            record["begin"] = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
        if when == "during_outer":
            del inner
            gc.collect()
            record["freed"] = "during the outer capture, survived"
        try:
            outer.capture_end()
            record["outer_end"] = "ok"
        except Exception as error:
            record["outer_end"] = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
    torch.cuda.synchronize()
    if when == "after_outer":
        del inner
        gc.collect()
        record["freed"] = "after the outer capture, survived"
    print(json.dumps(record), flush=True)
    if when == "at_exit":
        globals()["_kept"] = inner  # freed by interpreter finalization


def main() -> None:
    if len(sys.argv) == 3:
        scenario(sys.argv[1], sys.argv[2])
        return
    for how in HOW:
        for when in WHEN:
            child = subprocess.run(
                [sys.executable, "-m", "bench.probes.failed_capture_begin", how, when],
                capture_output=True,
                text=True,
                timeout=120,
            )
            tail = [line for line in child.stderr.splitlines() if "what()" in line][:1]
            print(
                json.dumps(
                    {
                        "how": how,
                        "when": when,
                        "rc": child.returncode,
                        "stdout": child.stdout.strip()[-400:],
                        "abort": tail,
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
