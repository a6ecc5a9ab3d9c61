"""What the ``bcg`` pytest plugin costs a project that installs the package but does not use it.

Times whole ``pytest -q`` processes on a throwaway one-test project, with the plugin (loaded
through its ``pytest11`` entry point, as an install loads it) and with ``-p no:bcg``, in
paired runs whose order alternates; writes ``results/plugin_overhead.json`` with the medians
and the median paired difference, in wall-clock and in CPU seconds (target: at most 0.2 s). This checkout's code is the one
measured (it goes first on ``PYTHONPATH``); where the package is not installed, a
``.dist-info`` with the same entry point stands in for the install. Run from the repository
root: ``python3 -m bench.plugin_overhead [--pairs N]``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 0.2
ONE_TEST = "def test_one():\n    assert 1 + 1 == 2\n"


def _installed() -> bool:
    return any(ep.name == "bcg" for ep in importlib.metadata.entry_points(group="pytest11"))


def _stand_in_install(where: Path) -> None:
    """The entry point an install registers, for a bare checkout."""
    info = where / "breakable_cudagraph_bench-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: breakable-cudagraph-bench\n")
    (info / "entry_points.txt").write_text("[pytest11]\nbcg = bcg_pytest_plugin\n")


def _time(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall-clock seconds of the whole process, and its CPU seconds (user + system): on a
    loaded machine the wall clock is mostly waiting for a core, the CPU time what it cost."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(
            f"error: {' '.join(command)} exited {done.returncode}: {done.stdout[-500:]}"
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def measure(pairs: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bcg-plugin-bench-") as tmp:
        project, site = Path(tmp, "project"), Path(tmp, "site")
        project.mkdir()
        site.mkdir()
        (project / "test_one.py").write_text(ONE_TEST)
        installed = _installed()
        if not installed:
            _stand_in_install(site)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)])}
        for name in ("BCG_PROFILE", "BCG_DEVICE", "BCG_HYPOTHESIS_DB", "PYTEST_ADDOPTS"):
            env.pop(name, None)
        # The venv's own pytest script, as a user types it.
        pytest_script = str(Path(sys.executable).with_name("pytest"))
        base = [pytest_script, "-q", "-p", "no:cacheprovider"]
        with_plugin, without = base, [*base, "-p", "no:bcg"]
        _time(with_plugin, project, env)  # warm the file cache for both sides
        _time(without, project, env)
        on, off = [], []
        for pair in range(pairs):
            # Alternating order, so that a drift in the machine's load hits both sides alike.
            first, second = (with_plugin, without) if pair % 2 == 0 else (without, with_plugin)
            a, b = _time(first, project, env), _time(second, project, env)
            on.append(a if first is with_plugin else b)
            off.append(b if first is with_plugin else a)
    wall = statistics.median(x[0] - y[0] for x, y in zip(on, off))
    cpu = statistics.median(x[1] - y[1] for x, y in zip(on, off))
    return {
        "what": "pytest -q on a one-test project: with the bcg plugin vs -p no:bcg",
        "pairs": pairs,
        "installed": installed,
        "with_plugin_median_s": round(statistics.median(t for t, _ in on), 4),
        "without_plugin_median_s": round(statistics.median(t for t, _ in off), 4),
        "overhead_median_s": round(wall, 4),
        "with_plugin_cpu_median_s": round(statistics.median(c for _, c in on), 4),
        "without_plugin_cpu_median_s": round(statistics.median(c for _, c in off), 4),
        "overhead_cpu_median_s": round(cpu, 4),
        "target_s": TARGET_S,
        # Both: the wall clock is what a user waits, the CPU time what the plugin costs when
        # other processes crowd the machine (the wall clock is then mostly queueing).
        "met_wall": wall <= TARGET_S,
        "met_cpu": cpu <= TARGET_S,
        "with_plugin_s": [round(t, 4) for t, _ in on],
        "without_plugin_s": [round(t, 4) for t, _ in off],
        "with_plugin_cpu_s": [round(c, 4) for _, c in on],
        "without_plugin_cpu_s": [round(c, 4) for _, c in off],
        "python": platform.python_version(),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench.plugin_overhead")
    parser.add_argument("--pairs", type=int, default=10, help="paired runs (default: 10)")
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "results" / "plugin_overhead.json",
        help="where to write the result (default: results/plugin_overhead.json)",
    )
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error(f"--pairs must be at least 1, got {args.pairs}")
    result = measure(args.pairs)
    args.out.write_text(json.dumps(result, indent=2) + "\n")

    def verdict(met: bool) -> str:
        return "met" if met else "MISSED"

    print(
        f"plugin overhead, median of {args.pairs} pairs: wall {result['overhead_median_s']:+.3f} s "
        f"({result['with_plugin_median_s']:.3f} s with, {result['without_plugin_median_s']:.3f} s "
        f"without; {verdict(result['met_wall'])}), CPU {result['overhead_cpu_median_s']:+.3f} s "
        f"({verdict(result['met_cpu'])}); target <= {TARGET_S} s; load average "
        f"{result['load_average']}; written to {args.out}"
    )
    return 0 if result["met_wall"] and result["met_cpu"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
