"""The host-cost probe runs on the simulator and the CPU stand-ins, and refuses bad
arguments with one line and exit code 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--rounds", "1", "--n", "1", "--captures", "1", "--block", "1", "--capture-k", "4"]
TINY += ["--replay-k", "2", "--loop", "8"]


def _probe(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "bench.probes.host_cost_per_break", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("device", ["sim", "stub"])
def test_probe_prints_library_over_minimal_for_capture_and_replay(device: str) -> None:
    done = _probe("--device", device, *TINY)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "capture at k=4 (ms)" in done.stdout
    assert "replay per break at k=2, synced (us)" in done.stdout
    assert done.stdout.count("library/minimal") == 3
    assert ("tight loop of 8 breaks" in done.stdout) == (device == "stub")


@pytest.mark.parametrize(
    "args", [["--replay-k", "0"], ["--capture-k", "256"], ["--rounds", "0"], ["--device", "tpu"]]
)
def test_probe_refuses_bad_arguments_in_one_line(args: list[str]) -> None:
    done = _probe("--device", "stub", *args)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr
