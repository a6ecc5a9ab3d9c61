"""Rate of the default ``fuzz`` command on the simulator, as a user sees it, against its budget.

Runs ``python -m verification fuzz --device sim`` (its defaults: 100 examples) ``--runs``
times, each in a fresh process, and records per run the rate the command prints (examples
over the examples' own time), the start-up it prints beside it, the rate with that start-up
counted, the rate over the whole process (interpreter and imports included) and the load
average just before. Writes ``results/sim_fuzz_rate.json`` with the medians and prints one
line (budget: 40 examples/s). A shared machine's core speed moves by 2x between hours with no
load to show for it, so the file also records how long a fixed pure-Python loop takes,
before and after. Run from the repository root: ``python -m bench.sim_fuzz_rate [--runs 5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET = 40.0
_PRINTED = re.compile(
    r"fuzz: (?P<examples>\d+) examples, (?P<findings>\d+) findings.*?"
    r"(?P<rate>[\d.]+) examples/s(?: \(start-up (?P<startup>[\d.]+) s\))?"
)


def one_run() -> dict[str, float]:
    """One default ``fuzz`` in a fresh process; raises if it fails or prints no rate."""
    load = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "verification", "fuzz", "--device", "sim"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    wall = time.perf_counter() - start
    match = _PRINTED.search(done.stdout)
    if done.returncode != 0 or match is None:
        raise RuntimeError(f"fuzz exited {done.returncode}: {(done.stdout + done.stderr)[-500:]}")
    examples, rate = int(match["examples"]), float(match["rate"])
    startup = float(match["startup"] or 0.0)
    return {
        "load_1min": load,
        "printed_examples_per_s": rate,
        "startup_s": startup,
        "with_startup_examples_per_s": examples / (examples / rate + startup),
        "process_wall_s": wall,
        "process_examples_per_s": examples / wall,
        "findings": int(match["findings"]),
    }


def calibration_s() -> float:
    """Seconds for ten million iterations of a bare Python loop: the core's speed now."""
    start = time.perf_counter()
    total = 0
    for i in range(10_000_000):
        total += i
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sim_fuzz_rate")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "sim_fuzz_rate.json")
    args = parser.parse_args(argv)
    if args.runs < 1:
        print("error: --runs must be at least 1", file=sys.stderr)
        return 2
    before = calibration_s()
    runs = [one_run() for _ in range(args.runs)]
    calibration = {"before_s": before, "after_s": calibration_s()}
    medians = {
        key: statistics.median(run[key] for run in runs)
        for key in (
            "printed_examples_per_s",
            "startup_s",
            "with_startup_examples_per_s",
            "process_examples_per_s",
            "load_1min",
        )
    }
    result = {
        "command": "python -m verification fuzz --device sim",
        "budget": BUDGET,
        "runs": runs,
        "median": medians,
        "cpus": os.cpu_count(),
        "calibration_loop_10M": calibration,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"sim fuzz rate: median {medians['printed_examples_per_s']:.1f} examples/s as printed "
        f"(start-up {medians['startup_s']:.1f} s apart), "
        f"{medians['with_startup_examples_per_s']:.1f} with it, "
        f"{medians['process_examples_per_s']:.1f} over the whole process, over {args.runs} runs "
        f"at load {medians['load_1min']:.2f}, 10M-step loop {before:.2f} s "
        f"(budget {BUDGET:.0f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
