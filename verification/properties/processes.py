"""The property checks of :mod:`verification.properties`, run in this process or one child per
property: what ``check`` runs, and certify's ``properties`` check under it.

Each check runs in a process of its own: a new interpreter on a GPU (:func:`run_in_child`), a
fork of this one on the simulator (:func:`run_forked`), so that no check sees another's
leftovers. A child killed by a signal becomes a ``target-bug`` finding naming the signal, the
scenario and target call each thread was in (:mod:`verification.breadcrumbs`) and the first
line of the error it printed;
results cross the process boundary as JSON (:func:`to_json`, :func:`from_json`). A check
whose finding left the target unusable in its child goes on in a fresh child from where it
stopped (:class:`~verification.properties.base.Resume`), so that no bug hides the ones after
it; :func:`merge` joins the parts into one result. In one process (:func:`run_properties`)
the checks after one that left the target unusable are skipped.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from verification import breadcrumbs
from verification.breadcrumbs import first_error_line
from verification.causes import HUNG, Cause
from verification.devices import DeviceKind, device_context
from verification.errors import raise_if_interrupted
from verification.findings import SKIPPED, TARGET_BUG
from verification.isolation import cores, run_child, signal_name, stall_s, stalled
from verification.ops.spec import TensorMeta
from verification.programs import Program, Step
from verification.properties import PROPERTIES
from verification.properties.base import (
    CheckConfig,
    Resume,
    finding_key,
    property_finding,
    unusable,
)
from verification.properties.base import CheckResult as PropertyResult
from verification.targets import Target

DEFAULT_CYCLES = 100
# A child's files for its parent, in a scratch folder of the parent's.
TRAIL = "breadcrumbs.txt"
STDERR = "stderr.txt"
# The properties whose budget includes --cycles (capture, replay and reset repeated).
CYCLING_PROPERTIES = ("repetition",)


def names(choice: str) -> list[str]:
    return list(PROPERTIES) if choice == "all" else [choice]


def run_properties(
    choice: str,
    target: Target,
    kind: DeviceKind,
    examples: int,
    seed: int = 0,
    cycles: int = DEFAULT_CYCLES,
    resume: Resume | None = None,
    *,
    seconds: float | None = None,
    verdict_only: bool = False,
) -> list[PropertyResult]:
    """Runs the chosen properties in this process on device ``kind``, each within ``examples``
    and, when given, ``seconds``, the one chosen from where ``resume`` says an earlier process
    stopped. Once a check leaves the target unusable, the rest are skipped: they would report
    its leftover as bugs of their own. A result whose ``resume`` is set has work left for a
    fresh process."""
    results: list[PropertyResult] = []
    with device_context(kind) as device:
        config = CheckConfig(
            target, kind, device, examples, seed, cycles, seconds=seconds, verdict_only=verdict_only
        )
        left_by: str | None = None
        for name in names(choice):
            if left_by is not None:
                skipped = f"target unusable after {left_by}"
                results.append(PropertyResult(name, 0, 0.0, skipped=skipped))
                continue
            config.resume = resume or Resume()
            result = PROPERTIES[name].check(config)
            result.resume = config.next_resume
            results.append(result)
            if unusable(config) is not None:
                left_by = name
    return results


def merge(first: PropertyResult, rest: PropertyResult) -> PropertyResult:
    """One check's result from two processes: the second went on where the first stopped. The
    first's note that it stopped goes (the rest did run), and each finding is kept once."""
    findings = [f for f in first.findings if f.kind != SKIPPED]
    keys = {finding_key(f) for f in findings}
    findings += [f for f in rest.findings if finding_key(f) not in keys]
    return PropertyResult(
        first.prop,
        first.examples + rest.examples,
        first.elapsed_s + rest.elapsed_s,
        findings,
        first.not_applicable,
        first.skipped,
        rest.resume,
    )


def _forked_check(
    name: str,
    target: Target,
    kind: DeviceKind,
    examples: int,
    seed: int,
    cycles: int,
    resume: Resume | None,
    seconds: float | None,
    conn: Any,
    scratch: str,
) -> None:
    # The OpenMP pool of the parent (made by any parallel CPU op before the fork, fuzz's for
    # one) does not exist in a forked child: its next parallel op would wait for it forever
    # (a hang seen certifying SGLang). One thread never touches that pool.
    torch.set_num_threads(1)
    # What a crash leaves for the parent: the breadcrumbs, and stderr (fd 2, where C++
    # writes too) in a file the parent reads and echoes.
    breadcrumbs.lay(Path(scratch) / TRAIL)
    err = os.open(Path(scratch) / STDERR, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(err, 2)
    os.close(err)
    results = run_properties(name, target, kind, examples, seed, cycles, resume, seconds=seconds)
    conn.send(json.dumps(to_json(results)))
    conn.close()


def run_forked(
    chosen: Sequence[str],
    target: Target,
    kind: DeviceKind,
    examples: int,
    seed: int = 0,
    cycles: int = DEFAULT_CYCLES,
    jobs: int = 1,
    *,
    seconds: float | None = None,
) -> list[PropertyResult]:
    """The simulator's isolation: each property in a forked child of this process, ``jobs`` at
    a time, each within ``seconds`` when given. A fork starts with torch and the harness imported, and with the target as this
    process holds it, untouched by any check; a new interpreter would spend seconds on
    imports per check. Not for a GPU: a CUDA context does not survive a fork. A check that
    stopped with work left goes on in another fork, from this process's clean state."""
    context = multiprocessing.get_context("fork")
    with device_context(kind):
        pass  # what opening the device imports (torch._dynamo, seconds), once for every child
    pending: list[tuple[int, str, Resume | None]] = [(n, c, None) for n, c in enumerate(chosen)]
    running: list[tuple[int, str, Any, Any]] = []
    results: dict[int, PropertyResult] = {}
    while pending or running:
        while pending and len(running) < jobs:
            number, name, resume = pending.pop(0)
            receive, send = context.Pipe(duplex=False)
            scratch = tempfile.TemporaryDirectory()
            child = context.Process(
                target=_forked_check,
                args=(
                    name, target, kind, examples, seed, cycles, resume, seconds, send,
                    scratch.name,
                ),
            )  # fmt: skip
            sys.stdout.flush()  # or the child would print what this process buffered
            sys.stderr.flush()
            child.start()
            send.close()  # so that a child gone without a result reads as EOF here
            running.append((number, name, receive, child, scratch))
        number, name, receive, child, scratch = running.pop(0)
        hung: list[str] = []
        # Waits for the result while the child's trail moves (stalled: a call stuck where
        # the child's own bound cannot end it), killing it once it stands still.
        while not receive.poll(1.0) and child.is_alive():
            raise_if_interrupted()  # a Ctrl-C a destructor here swallowed
            hung = stalled(Path(scratch.name) / TRAIL)
            if hung:
                child.kill()
                break
        try:
            data: str | None = None if hung else receive.recv()
        except EOFError:
            data = None
        child.join()
        with scratch:
            err = _read(Path(scratch.name) / STDERR)
            sys.stderr.write(err)
            trail = breadcrumbs.open_calls(Path(scratch.name) / TRAIL)
            constructs = breadcrumbs.open_constructs(Path(scratch.name) / TRAIL)
        if hung:
            part = _hang_result(name, hung)
        elif data is not None and child.exitcode == 0:
            part = from_json(json.loads(data))[0]
        else:
            part = _crash_result(name, child.exitcode or 1, err, trail, constructs)
        results[number] = merge(results[number], part) if number in results else part
        if part.resume is not None:
            pending.insert(0, (number, name, part.resume))
    return [results[number] for number in range(len(chosen))]


def forked_jobs(count: int) -> int:
    """Children at once on the simulator: one per core, at most one per check."""
    return max(1, min(count, cores()))


def to_json(results: list[PropertyResult]) -> list[dict[str, Any]]:
    return [
        {
            "prop": r.prop,
            "examples": r.examples,
            "elapsed_s": r.elapsed_s,
            "not_applicable": r.not_applicable,
            "skipped": r.skipped,
            "resume": None if r.resume is None else r.resume.as_json(),
            "findings": [
                {
                    "kind": f.kind,
                    "message": f.message,
                    "program": repr(f.program) if f.program is not None else None,
                    "seed": f.seed,
                    "scenario": [list(item) for item in f.scenario],
                    "cause": None if f.explained is None else f.explained.as_json(),
                }
                for f in r.findings
            ],
        }
        for r in results
    ]


def from_json(data: list[dict[str, Any]]) -> list[PropertyResult]:
    scope = {"Program": Program, "Step": Step, "TensorMeta": TensorMeta, "torch": torch}
    return [
        PropertyResult(
            r["prop"],
            r["examples"],
            r["elapsed_s"],
            [
                property_finding(
                    r["prop"],
                    f["kind"],
                    f["message"],
                    eval(f["program"], scope) if f["program"] else None,
                    f["seed"],
                    tuple(tuple(item) for item in f["scenario"]),
                    Cause.from_json(f["cause"]) if f.get("cause") else None,
                )
                for f in r["findings"]
            ],
            r.get("not_applicable"),
            r.get("skipped"),
            Resume.from_json(r["resume"]) if r.get("resume") else None,
        )
        for r in data
    ]


def run_in_child(name: str, argv: Sequence[str]) -> PropertyResult:
    """Runs one property in a child, and in another from where it stopped while a finding
    leaves the target unusable; a child killed by a signal (or gone without a result) is a
    target-bug finding whose message says how the process ended and its last line on stderr
    (the exception that ended it, as a rule)."""
    return go_on(_one_child(name, argv, None), argv)


def go_on(result: PropertyResult, argv: Sequence[str]) -> PropertyResult:
    """``result``, and what fresh children (of the command ``argv``) found going on from
    where it stopped, while one stops with work left."""
    while result.resume is not None:
        result = merge(result, _one_child(result.prop, argv, result.resume))
    return result


def _one_child(name: str, argv: Sequence[str], resume: Resume | None) -> PropertyResult:
    with tempfile.TemporaryDirectory() as scratch:
        result_file = Path(scratch) / "result.json"
        child = [*argv, "--no-isolate", "--result-file", str(result_file)]
        child[child.index(argv[1])] = name  # the one property, also when asked for all
        if resume is not None:
            child += ["--resume", json.dumps(resume.as_json())]
        done = run_child(child, capture_stderr=True, breadcrumbs=Path(scratch) / TRAIL)
        status = done.returncode
        if done.hung:
            return _hang_result(name, done.hung)
        if status >= 0 and result_file.exists():
            return from_json(json.loads(result_file.read_text()))[0]
        trail = breadcrumbs.open_calls(Path(scratch) / TRAIL)
        constructs = breadcrumbs.open_constructs(Path(scratch) / TRAIL)
    return _crash_result(name, status, done.stderr or "", trail, constructs)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _hang_result(name: str, hung: Sequence[str]) -> PropertyResult:
    """The finding of a child killed for standing still with calls open (``hung``)."""
    message = (
        f"hang: the check's process did not return from {'; '.join(hung)} within "
        f"{stall_s():g} s, and was killed"
    )
    return PropertyResult(name, 0, 0.0, [property_finding(name, TARGET_BUG, message, cause=HUNG)])


def _crash_result(
    name: str, status: int, err: str, trail: Sequence[str] = (), constructs: Sequence[str] = ()
) -> PropertyResult:
    """The finding of a child that died: how, in which scenario and target call (its open
    breadcrumbs, one per thread), and the first line of what it said on stderr; a child that
    left neither says that it did not. Its cause is the construct it died in, innermost first
    (:func:`~verification.breadcrumbs.construct`), so that it is one root cause with what the
    same construct raises in another check; without one, only its symptom."""
    what = (
        f"died by signal {signal_name(status)}" if status < 0 else f"exited {status} with no result"
    )
    where = "; ".join(trail) if trail else "outside any target call the harness marks"
    said = first_error_line(err)
    message = f"crash: the check's process {what} in {where}; " + (
        f"it said: {said[:300]}" if said else "it said nothing on stderr"
    )
    cause = Cause("crash", constructs[0]) if constructs else None
    return PropertyResult(name, 0, 0.0, [property_finding(name, TARGET_BUG, message, cause=cause)])
