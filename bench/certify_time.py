"""How long ``python -m verification certify`` takes as a user runs it, and where the time goes.

Runs, in rounds, each in a fresh process and in a rotated order so that a noisy machine
weighs on every variant alike: ``certify --no-sensitivity``, the default ``certify`` with no
cached evidence (a new user's first run: the planted-bug evidence is measured), the default
with the evidence cached (every later run), and ``--sensitivity=fresh``. Reports each one's
wall time to the verdict, its ratio to ``--no-sensitivity`` in the same round, and the examples
each check ran. Writes ``results/certify_time_<device>.json`` and prints a markdown table.

Usage: ``python bench/certify_time.py [--device auto|cuda|sim] [--rounds 2] [--target MODULE]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"

VARIANTS: dict[str, list[str]] = {
    "no-sensitivity": ["--no-sensitivity"],
    "default, first run": [],
    "default, cached": [],
    "fresh": ["--sensitivity=fresh"],
}


def _one(name: str, argv: list[str], cache: Path, scratch: Path) -> dict[str, Any]:
    out = scratch / name.replace(" ", "_").replace(",", "")
    env = {**os.environ, "BCG_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "verification", "certify", *argv, "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"{name}: exit {done.returncode}\n{done.stderr[-2000:]}")
    cert = json.loads((out / "certificate.json").read_text())
    sensitivity = cert["sensitivity"]
    return {
        "seconds": round(seconds, 1),
        "verdict": cert["verdict"],
        "checks": {c["name"]: c["examples"] for c in cert["checks"]},
        "sensitivity": None
        if sensitivity is None
        else {
            "source": sensitivity["source"],
            "found": sensitivity["found"],
            "total": sensitivity["total"],
            "seconds": sensitivity["seconds"],
        },
        "warning_lines": [line for line in done.stderr.splitlines() if "arning" in line],
        "log_lines": len(done.stdout.splitlines()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=("auto", "cuda", "sim"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--target", default=None)
    args = parser.parse_args()
    common = ["--device", args.device] + (["--target", args.target] if args.target else [])
    names = list(VARIANTS)
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        warm = scratch / "warm-cache"
        for number in range(args.rounds):
            order = names[number % len(names) :] + names[: number % len(names)]
            # "cached" needs evidence of this environment: the first run of the round into
            # the warm cache measures it when the cache is still empty.
            if not (warm / "sensitivity").exists():
                _one("warm-up", [*common], warm, scratch)
            row: dict[str, Any] = {}
            for name in order:
                cache = warm if name == "default, cached" else scratch / f"empty-{number}-{name}"
                row[name] = _one(name, [*common, *VARIANTS[name]], cache, scratch)
                print(f"round {number + 1} {name}: {row[name]['seconds']} s", flush=True)
            rounds.append(row)
    first = rounds[0]["no-sensitivity"]
    summary = {}
    for name in names:
        ratios = [r[name]["seconds"] / r["no-sensitivity"]["seconds"] for r in rounds]
        summary[name] = {
            "median_s": statistics.median(r[name]["seconds"] for r in rounds),
            "ratio_to_no_sensitivity": [round(x, 2) for x in ratios],
        }
    kind = args.device
    if kind == "auto":
        import torch

        kind = "cuda" if torch.cuda.is_available() else "sim"
    result = {"device": kind, "rounds": rounds, "summary": summary, "cpus": os.cpu_count()}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"certify_time_{kind}.json").write_text(json.dumps(result, indent=1) + "\n")
    print("\n| variant | median s | ratio to --no-sensitivity, per round |\n| --- | --- | --- |")
    for name in names:
        ratio = ", ".join(f"{x:.2f}" for x in summary[name]["ratio_to_no_sensitivity"])
        print(f"| {name} | {summary[name]['median_s']} | {ratio} |")
    print(f"\nexamples per check ({first['verdict']}): {first['checks']}")


if __name__ == "__main__":
    main()
