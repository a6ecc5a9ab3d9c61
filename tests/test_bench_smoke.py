"""The benchmark entry point runs on the simulator and its target judge flags a miss."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench import targets

ROOT = Path(__file__).resolve().parent.parent


def test_quick_benchmark_runs_on_the_simulator_and_writes_its_results(tmp_path: Path) -> None:
    # Child processes, and only bench.targets imported here: importing bench.transformer in
    # a worker made tests/test_planted_bugs.py's nested-break campaign draw other programs.
    command = [sys.executable, "-m", "bench", "--quick", "--device", "sim", "--out", str(tmp_path)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "bench.json").read_text())
    rows = result["micro"]["rows"]
    assert [r["breaks"] for r in rows] == [0, 1, 4]
    for name in result["targets"]:
        assert all(r[f"{name}_correct"] for r in rows), name
    assert all(r["library_correct"] for r in result["transformer"]["rows"])
    assert "## Targets" in (tmp_path / "bench.md").read_text()


def test_bad_arguments_exit_2_with_one_error_line() -> None:
    command = [sys.executable, "-m", "bench", "--device", "sim", "--breaks", "0", "300"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")


def _rows(library_per_break_s: float) -> dict:
    base = 100e-6
    return {
        "rows": [
            {
                "breaks": k,
                "torch_graph_synced_s": base,
                "library_synced_s": base + k * library_per_break_s,
                "minimal_synced_s": base + k * 10e-6,
            }
            for k in (0, 1, 256)
        ]
    }


def test_judge_flags_per_break_overhead_above_the_minimal_reference() -> None:
    floor = {"floor_s": 10e-6}
    slow = {(v["target"], v["breaks"]): v["met"] for v in targets.judge(_rows(20e-6), floor)}
    fast = {(v["target"], v["breaks"]): v["met"] for v in targets.judge(_rows(10e-6), floor)}
    assert slow[("per-break overhead: library / minimal", 256)] is False
    assert slow[("per-break overhead: library / floor", 256)] is False
    assert fast[("per-break overhead: library / minimal", 256)] is True
    assert fast[("per-break overhead: library / floor", 256)] is True


def test_cpu_capture_overhead_benchmark_runs_without_a_gpu() -> None:
    # Tiny sizes, and the working tree's package as its own baseline to exercise the loader.
    command = [
        sys.executable,
        "-m",
        "bench.capture_overhead_cpu",
        "--rounds",
        "1",
        "--breaks",
        "0",
        "2",
        "--ops",
        "3",
        "--numel",
        "8",
        "--baseline",
        str(ROOT / "breakable_cudagraph"),
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| 2 |" in done.stdout and "Tight loop of 2 breaks" in done.stdout


def test_sim_fuzz_rate_reads_the_rate_and_start_up_that_fuzz_prints() -> None:
    from bench.sim_fuzz_rate import _PRINTED

    line = (
        "fuzz: 100 examples, 0 findings, device=sim, target=breakable_cudagraph, "
        "72.9 examples/s (start-up 0.9 s)"
    )
    match = _PRINTED.search(line)
    assert match is not None
    assert (match["examples"], match["rate"], match["startup"]) == ("100", "72.9", "0.9")
    no_startup = _PRINTED.search(line.replace(" (start-up 0.9 s)", ""))
    assert no_startup is not None and no_startup["startup"] is None


def test_sim_fuzz_rate_refuses_zero_runs_with_one_error_line() -> None:
    command = [sys.executable, "-m", "bench.sim_fuzz_rate", "--runs", "0"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == "error: --runs must be at least 1"
