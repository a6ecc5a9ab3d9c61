"""``python -m verification check PROPERTY|all ...``: runs property checks against a target.

Exit status as ``fuzz``: 0 when no finding fails the target (``memory-held`` and
``known-unsafe`` findings are printed but do not fail), 1 when one does (its reproducer is
printed and, with ``--report DIR``, written), 2 for a usage error. Each property runs in a
child process of its own (``--isolate``: always on ``cuda``, on the simulator whenever more
than one is run), so no check sees another's leftovers and a check that aborts the process
becomes a ``crash`` finding naming the signal. Run in one process (``--no-isolate``), the
checks after one that left the target unusable are skipped, not run on its leftovers.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
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
from verification.properties.base import CheckConfig, CheckResult, PropertyFinding, unusable
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
    """Runs the chosen properties in this process on device ``kind``. Once a check leaves the
    target unusable, the rest are skipped: they would report its leftover as bugs of their own."""
    results: list[CheckResult] = []
    with device_context(kind) as device:
        config = CheckConfig(target, kind, device, examples, seed, cycles)
        left_by: str | None = None
        for name in names(choice):
            if left_by is not None:
                results.append(
                    CheckResult(name, 0, 0.0, skipped=f"target unusable after {left_by}")
                )
                continue
            results.append(PROPERTIES[name].check(config))
            if unusable(config) is not None:
                left_by = name
    return results


def _to_json(results: list[CheckResult]) -> list[dict[str, Any]]:
    return [
        {
            "prop": r.prop,
            "examples": r.examples,
            "elapsed_s": r.elapsed_s,
            "not_applicable": r.not_applicable,
            "skipped": r.skipped,
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
            r.get("skipped"),
        )
        for r in data
    ]


def _signal_name(status: int) -> str:
    number = -status
    return (
        signal.Signals(number).name if number in signal.Signals._value2member_map_ else str(number)
    )


def _child_argv(name: str, argv: Sequence[str], result_file: Path) -> list[str]:
    child = [*argv, "--no-isolate", "--result-file", str(result_file)]
    child[child.index(argv[1])] = name  # the one property, also when asked for all
    return [sys.executable, "-m", "verification", *child]


def run_isolated(name: str, argv: Sequence[str]) -> CheckResult:
    """Runs one property in a new interpreter; a child killed by a signal (or gone without a
    result) is a target-bug finding whose message says how the process ended and its last
    line on stderr (the exception that ended it, as a rule)."""
    with tempfile.TemporaryDirectory() as scratch:
        result_file = Path(scratch) / "result.json"
        done = subprocess.run(
            _child_argv(name, argv, result_file), stderr=subprocess.PIPE, text=True
        )
        sys.stderr.write(done.stderr or "")
        if done.returncode >= 0 and result_file.exists():
            return _from_json(json.loads(result_file.read_text()))[0]
    return _crash_result(name, done.returncode, done.stderr or "")


def _forked_check(
    name: str, target: Any, kind: str, examples: int, seed: int, cycles: int, conn: Any
) -> None:
    results = run_properties(name, target, kind, examples, seed, cycles)
    conn.send(json.dumps(_to_json(results)))
    conn.close()


def run_forked(
    chosen: Sequence[str],
    target: Any,
    kind: str,
    examples: int,
    seed: int = 0,
    cycles: int = DEFAULT_CYCLES,
    jobs: int = 1,
) -> list[CheckResult]:
    """The simulator's isolation: each property in a forked child of this process, ``jobs`` at
    a time. A fork starts with torch and the harness imported, and with the target as this
    process holds it, untouched by any check; a new interpreter would spend seconds on
    imports per check. Not for a GPU: a CUDA context does not survive a fork."""
    context = multiprocessing.get_context("fork")
    with device_context(kind):
        pass  # what opening the device imports (torch._dynamo, seconds), once for every child
    pending = list(enumerate(chosen))
    running: list[tuple[int, str, Any, Any]] = []
    results: dict[int, CheckResult] = {}
    while pending or running:
        while pending and len(running) < jobs:
            number, name = pending.pop(0)
            receive, send = context.Pipe(duplex=False)
            child = context.Process(
                target=_forked_check, args=(name, target, kind, examples, seed, cycles, send)
            )
            sys.stdout.flush()  # or the child would print what this process buffered
            sys.stderr.flush()
            child.start()
            send.close()  # so that a child gone without a result reads as EOF here
            running.append((number, name, receive, child))
        number, name, receive, child = running.pop(0)
        try:
            data: str | None = receive.recv()
        except EOFError:
            data = None
        child.join()
        if data is not None and child.exitcode == 0:
            results[number] = _from_json(json.loads(data))[0]
        else:
            results[number] = _crash_result(name, child.exitcode or 1, "")
    return [results[number] for number in range(len(chosen))]


def _crash_result(name: str, status: int, err: str) -> CheckResult:
    what = (
        f"died by signal {_signal_name(status)}"
        if status < 0
        else f"exited {status} with no result"
    )
    last = [line.strip() for line in (err or "").splitlines() if line.strip()][-1:]
    said = f"; its last line on stderr: {last[0][:300]}" if last else ""
    message = f"crash: the check's process {what}{said}"
    return CheckResult(name, 0, 0.0, [PropertyFinding(name, TARGET_BUG, message)])


def main(args: argparse.Namespace, argv: Sequence[str]) -> int:
    kind = resolve_device(args.device)
    target = load_target(args.target, args.contract)
    writable_dir(args.report, "--report")
    chosen = names(args.property)
    # Each check in a process of its own, on both devices, when more than one is run: none
    # sees another's leftovers. One at a time on a GPU, whose memory figures a neighbour moves.
    isolate = args.isolate if args.isolate is not None else kind == "cuda" or len(chosen) > 1
    if isolate and kind == "cuda":
        results = [run_isolated(name, argv) for name in chosen]
    elif isolate:
        jobs = max(1, min(len(chosen), os.cpu_count() or 1))
        results = run_forked(chosen, target, kind, args.examples, args.seed, args.cycles, jobs)
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
        if result.skipped is not None:
            print(f"check {result.prop}: skipped: {result.skipped}")
            continue
        verdict = "FAIL" if result.failed else "pass"
        print(
            f"check {result.prop}: {verdict}, {result.examples} examples, {result.elapsed_s:.1f} s"
        )
    failed = [r.prop for r in results if r.failed]
    checked = [r for r in results if r.not_applicable is None and r.skipped is None]
    skipped = [r.prop for r in results if r.skipped is not None]
    print(
        f"check: {len(checked) - len(failed)} of {len(checked)} properties hold, device={kind}, "
        f"target={target.name}"
        + (f"; failed: {', '.join(failed)}" if failed else "")
        + (
            f"; not applicable: {len(results) - len(checked) - len(skipped)}"
            if len(checked) + len(skipped) < len(results)
            else ""
        )
        + (f"; skipped: {', '.join(skipped)}" if skipped else "")
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
    # Each check in a process of its own: a new one on a GPU (the target imported by name),
    # a fork of this one on the simulator.
    if run.device == "cuda" and target_name is not None:
        argv = ["check", "all", "--target", target_name, "--device", run.device]
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
    elif run.device == "sim":
        jobs = max(1, min(len(PROPERTIES), os.cpu_count() or 1))
        results = run_forked(
            list(PROPERTIES), run.target, run.device, examples, run.config.seed, cycles, jobs
        )
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
