"""``python -m verification check PROPERTY|all ...``: runs property checks against a target.

Exit status as ``fuzz``: 0 when no finding fails the target (``memory-held`` and
``known-unsafe`` findings are printed but do not fail), 1 when one does (its reproducer is
printed and, with ``--report DIR``, written), 2 for a usage error. On ``cuda`` each property
runs in a child process (``--isolate``), so a check that aborts the process becomes a
``crash`` finding naming the signal.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verification.cli_support import writable_dir
from verification.contracts import CONTRACTS
from verification.devices import DEVICE_CHOICES, device_context, resolve_device
from verification.finding_kinds import TARGET_BUG
from verification.properties import PROPERTIES
from verification.properties.base import CheckConfig, CheckResult, PropertyFinding
from verification.properties.reproduce import render, write
from verification.targets import DEFAULT_TARGET, load_target

DEFAULT_CYCLES = 100


def add_parser(commands: Any, count: Any) -> None:
    """Registers ``check`` on the CLI's subparsers; ``count(minimum)`` parses counts."""
    check = commands.add_parser("check", help="run property checks against a target")
    check.add_argument("property", choices=(*PROPERTIES, "all"), metavar="PROPERTY|all")
    check.add_argument("--target", default=DEFAULT_TARGET, help="importable module under test")
    check.add_argument("--contract", help=f"break contract ({', '.join(CONTRACTS)})")
    check.add_argument("--device", default="auto", choices=DEVICE_CHOICES)
    check.add_argument("--examples", type=count(1), default=25, help="hypothesis budget")
    check.add_argument("--seed", type=count(0), default=0)
    check.add_argument(
        "--cycles",
        type=count(4),
        default=DEFAULT_CYCLES,
        help="repetition cycles (10000: thorough)",
    )
    check.add_argument("--report", type=Path, help="directory for reproducer scripts")
    check.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None)
    check.add_argument("--result-file", type=Path, help=argparse.SUPPRESS)


def names(choice: str) -> list[str]:
    return list(PROPERTIES) if choice == "all" else [choice]


def run_properties(
    choice: str, target: Any, kind: str, examples: int, seed: int = 0, cycles: int = DEFAULT_CYCLES
) -> list[CheckResult]:
    """Runs the chosen properties in this process on device ``kind``."""
    with device_context(kind) as device:
        config = CheckConfig(target, kind, device, examples, seed, cycles)
        return [PROPERTIES[name].check(config) for name in names(choice)]


def _to_json(results: list[CheckResult]) -> list[dict[str, Any]]:
    return [
        {
            "prop": r.prop,
            "examples": r.examples,
            "elapsed_s": r.elapsed_s,
            "not_applicable": r.not_applicable,
            "findings": [
                {
                    "kind": f.kind,
                    "message": f.message,
                    "program": repr(f.program) if f.program is not None else None,
                    "seed": f.seed,
                    "scenario": [list(item) for item in f.scenario],
                }
                for f in r.findings
            ],
        }
        for r in results
    ]


def _from_json(data: list[dict[str, Any]]) -> list[CheckResult]:
    import torch

    from verification.ops.spec import TensorMeta
    from verification.programs import Program, Step

    scope = {"Program": Program, "Step": Step, "TensorMeta": TensorMeta, "torch": torch}
    return [
        CheckResult(
            r["prop"],
            r["examples"],
            r["elapsed_s"],
            [
                PropertyFinding(
                    r["prop"],
                    f["kind"],
                    f["message"],
                    eval(f["program"], scope) if f["program"] else None,
                    f["seed"],
                    tuple(tuple(item) for item in f["scenario"]),
                )
                for f in r["findings"]
            ],
            r.get("not_applicable"),
        )
        for r in data
    ]


def _signal_name(status: int) -> str:
    number = -status
    return (
        signal.Signals(number).name if number in signal.Signals._value2member_map_ else str(number)
    )


def run_isolated(name: str, argv: Sequence[str]) -> CheckResult:
    """Runs one property in a child; a child killed by a signal (or gone without a result) is a
    target-bug finding whose message says how the process ended and its last line on stderr
    (the exception that ended it, as a rule)."""
    with tempfile.TemporaryDirectory() as scratch:
        result_file = Path(scratch) / "result.json"
        child = [*argv, "--no-isolate", "--result-file", str(result_file)]
        child[child.index(argv[1])] = name  # the one property, also when asked for all
        done = subprocess.run(
            [sys.executable, "-m", "verification", *child], stderr=subprocess.PIPE, text=True
        )
        sys.stderr.write(done.stderr or "")
        status = done.returncode
        if status >= 0 and result_file.exists():
            return _from_json(json.loads(result_file.read_text()))[0]
    what = (
        f"died by signal {_signal_name(status)}"
        if status < 0
        else f"exited {status} with no result"
    )
    last = [line.strip() for line in (done.stderr or "").splitlines() if line.strip()][-1:]
    said = f"; its last line on stderr: {last[0][:300]}" if last else ""
    message = f"crash: the check's process {what}{said}"
    return CheckResult(name, 0, 0.0, [PropertyFinding(name, TARGET_BUG, message)])


def main(args: argparse.Namespace, argv: Sequence[str]) -> int:
    kind = resolve_device(args.device)
    target = load_target(args.target, args.contract)
    writable_dir(args.report, "--report")
    isolate = args.isolate if args.isolate is not None else kind == "cuda"
    if isolate:
        results = [run_isolated(name, argv) for name in names(args.property)]
    else:
        results = run_properties(args.property, target, kind, args.examples, args.seed, args.cycles)
    if args.result_file is not None:
        args.result_file.write_text(json.dumps(_to_json(results)))
        return 1 if any(r.failed for r in results) else 0
    command = " ".join(["python -m verification", *argv])
    number = 0
    for result in results:
        for finding in result.findings:
            print(f"FINDING {finding.summary()}")
            text = render(finding, target, kind, command) if finding.fails else None
            if text is not None:
                print("---- reproducer ----\n" + text + "--------------------")
                if args.report is not None:
                    print(f"reproducer written to {write(args.report, number, finding, text)}")
                    number += 1
        if result.not_applicable is not None:
            print(f"check {result.prop}: not applicable, {result.not_applicable}")
            continue
        verdict = "FAIL" if result.failed else "pass"
        print(
            f"check {result.prop}: {verdict}, {result.examples} examples, {result.elapsed_s:.1f} s"
        )
    failed = [r.prop for r in results if r.failed]
    checked = [r for r in results if r.not_applicable is None]
    print(
        f"check: {len(checked) - len(failed)} of {len(checked)} properties hold, device={kind}, "
        f"target={target.name}"
        + (f"; failed: {', '.join(failed)}" if failed else "")
        + (
            f"; not applicable: {len(results) - len(checked)}"
            if len(checked) < len(results)
            else ""
        )
    )
    return 1 if failed else 0


def certify_check(run: Any) -> Any:
    """Every property as one check of certify's table (``verification.checks``)."""
    from verification.checks import CheckResult as CertifiedCheck
    from verification.oracle import Finding
    from verification.programs import Program

    examples = max(5, (run.config.examples or 25) // 10)
    # The 10,000 cycles are for the GPU, whose caching allocator absorbs a small leak
    # for a while; the simulator's allocator shows any per-cycle leak in 1,000.
    long_run = (run.config.examples or 0) >= 2000
    cycles = (10_000 if run.device == "cuda" else 1_000) if long_run else DEFAULT_CYCLES
    target_name = run.config.target if isinstance(run.config.target, str) else None
    if run.device == "cuda" and target_name is not None:
        argv = ["check", "all", "--target", target_name, "--device", "cuda"]
        argv += [
            "--examples",
            str(examples),
            "--cycles",
            str(cycles),
            "--seed",
            str(run.config.seed),
        ]
        if run.config.contract:
            argv += ["--contract", str(run.config.contract)]
        results = [run_isolated(name, argv) for name in PROPERTIES]
    else:
        results = run_properties("all", run.target, run.device, examples, run.config.seed, cycles)
    empty = Program((), (), ())
    findings = [
        Finding(
            f"property {f.prop}",  # type: ignore[arg-type]
            f.message,
            f.program or empty,
            f.seed or 0,
            kind=f.kind,
        )
        for r in results
        for f in r.findings
    ]
    run.progress(sum(r.examples for r in results))
    return CertifiedCheck(
        "properties",
        sum(r.examples for r in results),
        sum(r.elapsed_s for r in results),
        findings,
        {"property examples": {r.prop: r.examples for r in results}},
    )
