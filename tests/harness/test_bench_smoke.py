"""The benchmark entry point runs on the simulator and its target judge flags a miss."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench import capture_sweep, targets

ROOT = Path(__file__).resolve().parents[2]


def test_quick_benchmark_runs_on_the_simulator_and_writes_its_results(tmp_path: Path) -> None:
    # Child processes, and only bench.targets imported here: importing bench.transformer in
    # a worker made tests/harness/test_planted_bugs.py's nested-break campaign draw other programs.
    command = [sys.executable, "-m", "bench", "--quick", "--device", "sim", "--out", str(tmp_path)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "bench.json").read_text())
    rows = result["micro"]["rows"]
    assert [r["breaks"] for r in rows] == [0, 1, 4]
    for name in result["targets"]:
        assert all(r[f"{name}_correct"] for r in rows), name
    assert all(r["library_correct"] for r in result["transformer"]["rows"])
    assert all(r["library_nosync_correct"] for r in result["transformer"]["rows"])
    # The side-stream scenario: every round holds every target at every k, with the
    # synced time, the launch-only CPU time and the CPU time per graph launch side by side.
    side = result["side_stream"]
    assert side["correct"] == {name: True for name in side["targets"]}
    assert len(side["rounds"]) == 2 and all("state_gpu_s" in r for r in side["rounds"])
    for rnd in side["rounds"]:
        for k in ("0", "1", "4"):
            for name in side["targets"]:
                cell = rnd["k"][k][name]
                assert {"synced_s", "launch_cpu_s", "graph_launch_cpu_s", "capture_s"} <= set(cell)
    assert (
        side["summary"]["library"]["1"]["added_s"]["min"]
        <= (side["summary"]["library"]["1"]["added_s"]["max"])
    )
    text = (tmp_path / "bench.md").read_text()
    assert "## Targets" in text and "## Side stream" in text and "library, no sync" in text


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
    assert "An engine's sweep (67 sizes x 8 layers" in done.stdout and "baseline" in done.stdout


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


def _side(library_added_s: dict[int, float], minimal_added_s: dict[int, float], rounds: int = 2):
    """Rounds of a side-stream run whose added replay over k = 0 is as given."""

    def cells(added: dict[int, float]) -> dict:
        out = {"0": {"synced_s": 250e-6, "capture_s": 1e-3}}
        for k, extra in added.items():
            out[str(k)] = {"synced_s": 250e-6 + extra, "capture_s": 1e-3}
        return out

    lib, ref = cells(library_added_s), cells(minimal_added_s)
    return {
        "rounds": [
            {"k": {k: {"library": lib[k], "minimal": ref[k]} for k in lib}} for _ in range(rounds)
        ]
    }


def test_side_stream_judge_flags_a_first_break_cost_and_allows_the_2_us_slack() -> None:
    minimal = {1: 4e-6, 4: 12e-6, 16: 48e-6}
    slow = targets.judge_side_stream(_side({1: 52e-6, 4: 12e-6, 16: 48e-6}, minimal))
    slack = targets.judge_side_stream(_side({1: 5.5e-6, 4: 12e-6, 16: 48e-6}, minimal))
    per_break = targets.judge_side_stream(_side({1: 4e-6, 4: 14e-6, 16: 48e-6}, minimal))
    met = {(v["breaks"], v["met"]) for v in slow}
    assert (1, False) in met and (4, True) in met and (16, True) in met
    assert all(v["met"] for v in slack)  # 1.375x, but within 2 us of the reference
    assert {v["breaks"]: v["met"] for v in per_break} == {1: True, 4: False, 16: True}


def test_side_stream_judge_fails_a_target_missed_in_one_round_only() -> None:
    minimal = {1: 4e-6}
    good, bad = _side({1: 4e-6}, minimal), _side({1: 60e-6}, minimal)
    mixed = {"rounds": good["rounds"] + bad["rounds"][:1]}
    (verdict,) = targets.judge_side_stream(mixed)
    assert verdict["met"] is False and abs(verdict["ratio"] - 15.0) < 1e-9


def test_transformer_judge_flags_a_non_syncing_library_slower_than_1_25_full_graphs() -> None:
    rows = [
        {"batch": 1, "library_nosync_s": 1.2e-3, "full_graph_s": 1e-3},
        {"batch": 64, "library_nosync_s": 1.3e-3, "full_graph_s": 1e-3},
    ]
    verdicts = targets.judge_transformer({"rows": rows})
    assert [(v["breaks"], v["met"]) for v in verdicts] == [(1, True), (64, False)]


def test_added_time_is_the_paired_median_when_a_round_has_it() -> None:
    # A state change between the k = 0 and k = 1 halves moves the medians' difference (+45 us)
    # but not the paired differences the round recorded (+3 us).
    cells = {
        "0": {"library": {"synced_s": 220e-6}},
        "1": {"library": {"synced_s": 268e-6, "added_s": 3e-6}},
    }
    assert targets.added_s(cells, "library", 1) == 3e-6
    del cells["1"]["library"]["added_s"]
    assert abs(targets.added_s(cells, "library", 1) - 48e-6) < 1e-12


def test_capture_sweep_runs_every_column_in_both_orders_on_the_simulator(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "bench.capture_sweep", "--quick", "--device", "sim"]
    done = subprocess.run(
        [*command, "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "capture_sweep.json").read_text())
    (runs,) = result["layers"].values()
    assert (
        set(runs["columns"]) == set(capture_sweep.COLUMNS) >= {"capture_set_shared", "per_capture"}
    )
    for rows in runs["columns"].values():
        assert len(rows) == 2 and all(row["correct"] for row in rows), rows
        assert all(
            {"capture_s", "capture_cpu_s", "pool_bytes", "beyond_pool_bytes", "graphs"} <= set(row)
            for row in rows
        )
        assert all(set(row["replay_s"]) == {"1", "8"} for row in rows)
        assert all(set(row["alternating_s"]) == {"alternate", "repeat"} for row in rows)
    table = (tmp_path / "capture_sweep.md").read_text()
    assert (
        "| capture of every size, s |" in table and "| capture / warm-up, same process |" in table
    )


def test_capture_sweep_refuses_zero_layers_with_one_error_line() -> None:
    command = [sys.executable, "-m", "bench.capture_sweep", "--device", "sim", "--layers", "0"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == "error: --layers, --replays and --rounds must be at least 1"
