"""Whether ``bisect`` gives one answer on both devices: the op and line it names for every
planted model, and the ops each forward dispatches, on this device, as JSON; then, given a
GPU's file and the simulator's, where they differ.

A model's answer is the finding's kind, op, line and line to change (or none), and its op
trace the (op, line) pairs of one eager forward (``verification.bisect.op_trace``). The
compare step writes a Markdown table and exits 1 when any model's op or line, or its op
trace, differs between the two files.

Usage: ``python -m bench.bisect_agreement --device sim|cuda --out FILE.json`` and
``python -m bench.bisect_agreement --compare GPU.json SIM.json [--md FILE.md]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

# Planted models of tests/harness/bisect and the steps each needs (models a race or
# nothing but the simulator's detector finds are left out: a GPU may not see them).
MODELS = {
    "tests.harness.bisect.planted_models:correct": 8,
    "tests.harness.bisect.planted_models:frozen_host_value": 3,
    "tests.harness.bisect.planted_models:cpu_scalar_temperature": 3,
    "tests.harness.bisect.planted_models:attention_not_a_break": 3,
    "tests.harness.bisect.planted_models:break_caches_a_tensor": 3,
    "tests.harness.bisect.planted_models:rebound_input": 3,
    "tests.harness.bisect.planted_models:rebound_positions": 3,
    "tests.harness.bisect.planted_models:host_branch": 3,
    "tests.harness.bisect.planted_models:break_gets_a_host_number": 3,
    "tests.harness.bisect.planted_models:host_read_not_a_break": 2,
    "tests.harness.bisect.planted_models:returns_argument_or_new": 3,
    "tests.harness.bisect.llama_model:llama": 8,
    "examples.bisect_transformer:transformer": 2,
    "tests.harness.bisect.traced_models:casts_and_constants": 0,  # traced only
}


def _line(site: Any) -> str | None:
    return None if site is None else f"{Path(site[0]).name}:{site[1]}"


def measure(kind: str) -> dict[str, Any]:
    import subprocess

    answers: dict[str, Any] = {}
    for ref, steps in MODELS.items():
        # One process per model: bisect imports the model's module afresh, and a break
        # decorated in an earlier model's import would be invisible to it.
        code = (
            "import json, sys\n"
            "from bench.bisect_agreement import answer\n"
            f"json.dump(answer({ref!r}, {kind!r}, {steps}), sys.stdout)\n"
        )
        # The simulator's run as the command line makes it on a GPU host: the GPU hidden.
        env = {**os.environ, **({"CUDA_VISIBLE_DEVICES": ""} if kind == "sim" else {})}
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        if done.returncode != 0:
            answers[ref] = {"error": done.stderr.strip().splitlines()[-1:]}
        else:
            answers[ref] = json.loads(done.stdout.strip().splitlines()[-1])
        print(ref, answers[ref].get("finding", answers[ref].get("error")), flush=True)
    return answers


def answer(ref: str, kind: str, steps: int) -> dict[str, Any]:
    import contextlib
    import io

    from verification.bisect import bisect, op_trace

    out: dict[str, Any] = {"ops": [[name, _line(site)] for name, site in op_trace(ref, kind)]}  # type: ignore[arg-type]
    if steps:
        with contextlib.redirect_stdout(io.StringIO()):
            finding = bisect(ref, kind=kind, steps=steps).finding  # type: ignore[arg-type]
        out["finding"] = (
            None
            if finding is None
            else {
                "kind": finding.kind,
                "op": finding.op,
                "where": _line(finding.site),
                "change": _line(finding.change),
            }
        )
    return out


def compare(gpu: dict[str, Any], sim: dict[str, Any]) -> tuple[list[str], bool]:
    rows = ["| model | GPU names | simulator names | op traces |", "|---|---|---|---|"]
    same_everywhere = True
    for ref in sorted(set(gpu) | set(sim)):
        g, s = gpu.get(ref, {}), sim.get(ref, {})

        def named(a: dict[str, Any]) -> str:
            if "error" in a:
                return f"error: {a['error']}"
            f = a.get("finding")
            return "no divergence" if f is None else f"{f['op']} at {f['where']}"

        traces = "same" if g.get("ops") == s.get("ops") else _first_difference(g, s)
        same = named(g) == named(s) and traces == "same"
        same_everywhere &= same
        rows.append(f"| {ref} | {named(g)} | {named(s)} | {traces} |")
    return rows, same_everywhere


def _first_difference(g: dict[str, Any], s: dict[str, Any]) -> str:
    a, b = g.get("ops") or [], s.get("ops") or []
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"op {i}: GPU {x[0]} at {x[1]}, simulator {y[0]} at {y[1]}"
    return f"GPU {len(a)} ops, simulator {len(b)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("sim", "cuda"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("GPU", "SIM"))
    parser.add_argument("--md", type=Path)
    args = parser.parse_args(argv)
    if args.compare:
        gpu, sim = (json.loads(p.read_text()) for p in args.compare)
        rows, same = compare(gpu, sim)
        text = "\n".join(rows) + "\n"
        print(text)
        if args.md:
            args.md.write_text(text)
        return 0 if same else 1
    if not args.device or not args.out:
        parser.error("give --device and --out, or --compare GPU SIM")
    args.out.write_text(json.dumps(measure(args.device), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
