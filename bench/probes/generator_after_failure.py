"""GPU probe: the default CUDA generator after a capture that did not end cleanly.

On the H200 (call B and C of 2026-12-03) ``torch.rand`` outside any capture raised "Offset
increment outside graph capture encountered unexpectedly" in a test run after other tests of
``tests/sim/test_capture_semantics_h200.py`` on the same worker. Torch registers the default
generator with a graph at ``capture_begin`` and releases it at a successful ``capture_end``;
this probe asks which failed captures leave it in capture mode. Each scenario runs in a fresh child
and prints one JSON line: how the capture failed, then what ``torch.rand`` on the device does.
Run on a GPU machine: ``python -m bench.probes.generator_after_failure``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import torch

SCENARIOS = ("clean", "sync_in_capture", "second_begin", "linalg_inv", "end_without_begin")


def _rand() -> str:
    try:
        torch.rand(4, device="cuda")
        torch.cuda.synchronize()
        return "ok"
    except Exception as error:
        return f"{type(error).__name__}: {str(error).splitlines()[0]}"


def scenario(name: str) -> dict[str, str]:
    record = {"scenario": name}
    x = torch.ones(16, 16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        try:
            if name == "end_without_begin":
                g.capture_end()
            else:
                g.capture_begin()
                x * 2
                if name == "sync_in_capture":
                    try:
                        torch.cuda.synchronize()
                    except Exception as error:
                        record["sync"] = str(error).splitlines()[0]
                elif name == "second_begin":
                    try:
                        torch.cuda.CUDAGraph().capture_begin()
                    except Exception as error:
                        record["second_begin"] = str(error).splitlines()[0]
                elif name == "linalg_inv":
                    try:
                        torch.linalg.inv(x + torch.eye(16, device="cuda"))
                    except Exception as error:
                        record["inv"] = str(error).splitlines()[0]
                g.capture_end()
            record["end"] = "ok"
        except Exception as error:
            record["end"] = f"{type(error).__name__}: {str(error).splitlines()[0]}"
    record["capturing_after"] = str(torch.cuda.is_current_stream_capturing())
    record["rand_after"] = _rand()
    record["rand_on_new_generator"] = "ok"
    try:
        torch.rand(4, device="cuda", generator=torch.Generator(device="cuda"))
    except Exception as error:
        record["rand_on_new_generator"] = str(error).splitlines()[0]
    return record


def main() -> None:
    if len(sys.argv) > 1:
        print(json.dumps(scenario(sys.argv[1])))
        return
    for name in SCENARIOS:
        done = subprocess.run(
            [sys.executable, "-m", "bench.probes.generator_after_failure", name],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        line = done.stdout.strip().splitlines()[-1:] or [f'{{"scenario": "{name}"}}']
        print(
            line[0]
            if done.returncode == 0
            else json.dumps(
                {"scenario": name, "exit": done.returncode, "stderr": done.stderr[-300:]}
            )
        )


if __name__ == "__main__":
    main()
