"""The harness's teeth where a certificate was made: re-run every planted-bug target of
:mod:`verification.planted` in the same environment, through the check that must find it, and
count the hits.

Fuzz targets (``targets``, ``vllm_minimal``, ``library_targets``: ``BUGS`` and ``build(bug)``,
and ``CHECKS`` naming the property of a bug the fuzzer is not the one to find) run the
differential campaign with up to :data:`FUZZ_EXAMPLES` examples each; property targets
(``property_targets`` and ``duty_targets``: ``BUGS`` maps each bug to a description and
the property that must find it; ``runner_targets``: each for the runner property) run that property with the ``ci`` budget
the suite proves each is found within. The question is only whether the check fails, so each
stops at its first failing finding, unshrunk. The planted targets ship with the package, so
this measures from any install.

They run in worker processes, as many as there are cores (forks of this process on the
simulator, new interpreters on a GPU host), each taking the next target until none is left.
A worker killed by a signal counts the target it was running as found (a planted bug may
abort the process, as a nested capture begun on a GPU does); on a GPU a worker that leaves
CUDA unusable hands the rest to a fresh one.

What was measured is cached per harness source, torch, device and planted set
(:func:`cache_path`), so that the evidence is measured once per environment, and a
certificate built on it says so, with the date it was measured.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib
import json
import multiprocessing
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verification import bounds
from verification.certify.run import CertifyRun, CheckResult
from verification.devices import DeviceKind
from verification.errors import hide_expected_warnings
from verification.findings import fails_certificate
from verification.fuzz import CampaignConfig, run_campaign
from verification.isolation import cores
from verification.properties.processes import run_properties
from verification.targets import load_target

FUZZ_MODULES = (
    "verification.planted.targets",
    "verification.planted.vllm_minimal",
    "verification.planted.library_targets",
)
PROPERTY_MODULE = "verification.planted.property_targets"
# A target guarding some of its caller's duties itself, with a bug in one: the same form.
DUTY_MODULE = "verification.planted.duty_targets"
# The runner's planted bugs, each for the runner property.
RUNNER_MODULE = "verification.planted.runner_targets"
# A cap, not a cost: a campaign stops at its first finding. At 25 examples
# nested_break_recorded_twice was missed for seeds 0-3, while those seeds found it within 52 to
# 185 examples; 400 leaves twice that margin.
FUZZ_EXAMPLES = 400
# The ci profile's budget, within which tests/harness/properties/ finds every planted bug.
PROPERTY_EXAMPLES = 25
PROPERTY_CYCLES = 30
# The bound on a call of a planted target: a planted hang is a lock never freed, which a short
# bound finds as surely as the command's, and no planted target's call takes a second.
PLANTED_HANG_S = 10.0


@dataclass(frozen=True)
class Planted:
    """One planted bug: ``check`` is ``fuzz`` or the property that must find it."""

    name: str
    check: str
    module: str
    bug: str


def planted_targets() -> list[Planted]:
    """Every planted bug, fuzz targets first."""
    found = []
    for name in FUZZ_MODULES:
        module = importlib.import_module(name)
        checks = getattr(module, "CHECKS", {})  # a bug a property check finds, not the fuzzer
        found += [
            Planted(f"{name}:{bug}", checks.get(bug, "fuzz"), name, bug) for bug in module.BUGS
        ]
    for name in (PROPERTY_MODULE, DUTY_MODULE):
        module = importlib.import_module(name)
        found += [
            Planted(f"{name}:{bug}", entry[1], name, bug) for bug, entry in module.BUGS.items()
        ]
    module = importlib.import_module(RUNNER_MODULE)
    found += [
        Planted(f"{RUNNER_MODULE}:{bug}", "runner", RUNNER_MODULE, bug) for bug in module.BUGS
    ]
    return found


def _measure_one(planted: Planted, kind: DeviceKind, seed: int) -> dict[str, Any]:
    """One planted target through its check: found or not, examples run, seconds."""
    began = time.perf_counter()
    with bounds.limit(min(PLANTED_HANG_S, bounds.current())):
        found, examples = _found(planted, kind, seed)
    return {
        "name": planted.name,
        "check": planted.check,
        "found": found,
        "examples": examples,
        "seconds": round(time.perf_counter() - began, 2),
    }


def _found(planted: Planted, kind: DeviceKind, seed: int) -> tuple[bool, int]:
    """Whether the check found the planted bug, and the examples it ran."""
    target = load_target(importlib.import_module(planted.module).build(planted.bug))
    if planted.check == "fuzz":
        config = CampaignConfig(
            target=target, kind=kind, examples=FUZZ_EXAMPLES, seed=seed, verdict_only=True,
            database=None,
        )  # fmt: skip
        result = run_campaign(config)
        found, examples = any(fails_certificate(f.kind) for f in result.findings), result.examples
    else:
        (checked,) = run_properties(
            planted.check, target, kind, PROPERTY_EXAMPLES, seed, PROPERTY_CYCLES,
            verdict_only=True,
        )  # fmt: skip
        found, examples = checked.failed, checked.examples
    return found, examples


# A worker's exit status when it leaves CUDA unusable for the targets after its own.
_EXIT_SPENT = 4


def _worker(targets: Sequence[Planted], kind: DeviceKind, seed: int, taken: Any, log: str) -> None:
    """Takes the next target (``taken`` is the shared index of the next one) until none is
    left; writes a ``start`` line before each and its row after, so that the parent knows which
    target a dead worker was running."""
    import torch

    # What the planted bugs make torch print (a crash in a graph's destructor, say) is the
    # evidence's business, not the user's: the worker's stderr goes beside its log.
    with open(log + ".stderr", "a") as err:
        os.dup2(err.fileno(), 2)
    # A forked child never sees the parent's OpenMP pool: its first parallel op would wait
    # for that pool forever. One thread never touches it.
    torch.set_num_threads(1)
    hide_expected_warnings()
    library = load_target("breakable_cudagraph") if kind == "cuda" else None
    with open(log, "a") as out:
        while True:
            with taken.get_lock():
                index = taken.value
                taken.value += 1
            if index >= len(targets):
                return
            out.write(json.dumps({"start": targets[index].name}) + "\n")
            out.flush()
            out.write(json.dumps(_measure_one(targets[index], kind, seed)) + "\n")
            out.flush()
            if library is not None:
                from verification.usable import unusable

                if unusable(library, "cuda") is not None:
                    sys.exit(_EXIT_SPENT)


def _read_log(log: Path) -> tuple[list[dict[str, Any]], str | None]:
    """The rows a worker wrote, and the target it started without finishing, if any."""
    rows: list[dict[str, Any]] = []
    running = None
    if not log.exists():
        return rows, None
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        if "start" in entry:
            running = entry["start"]
        else:
            rows.append(entry)
            running = None
    return rows, running


def _run_workers(
    targets: Sequence[Planted],
    kind: DeviceKind,
    seed: int,
    workers: int,
    progress: Callable[[int], None],
) -> list[dict[str, Any]]:
    context = multiprocessing.get_context("fork" if kind == "sim" else "spawn")
    taken = context.Value("i", 0)
    by_name = {planted.name: planted for planted in targets}
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        running: list[tuple[Any, Path]] = []
        started = 0

        def start() -> None:
            nonlocal started
            log = Path(scratch) / f"worker{started}.jsonl"
            started += 1
            sys.stdout.flush()  # or the child would print what this process buffered
            sys.stderr.flush()
            process = context.Process(target=_worker, args=(targets, kind, seed, taken, str(log)))
            process.start()
            running.append((process, log))

        for _ in range(max(1, min(workers, len(targets)))):
            start()
        reported = 0
        while running:
            time.sleep(0.05)
            for process, log in list(running):
                if process.is_alive():
                    continue
                running.remove((process, log))
                finished, dead_on = _read_log(log)
                for row in finished:
                    rows[row["name"]] = row
                if dead_on is not None:
                    # Killed by a signal: the bug aborted the process (a nested capture begun on
                    # a GPU does), which ``check --isolate`` would report as a crash finding.
                    died = (process.exitcode or 0) < 0
                    planted = by_name[dead_on]
                    rows[dead_on] = {
                        "name": dead_on,
                        "check": planted.check,
                        "found": died,
                        "examples": 0,
                        "seconds": 0.0,
                        "ended": f"its worker ended with status {process.exitcode}",
                    }
                if taken.value < len(targets) and not running:
                    start()
            done = len(rows) + sum(len(_read_log(log)[0]) for _, log in running)
            if done > reported:
                progress(done - reported)
                reported = done
    return [rows[planted.name] for planted in targets if planted.name in rows]


def measure(
    device: str,
    seed: int = 0,
    progress: Callable[[int], None] = lambda advance: None,
    workers: int | None = None,
) -> dict[str, Any]:
    """Runs every planted target, ``workers`` at a time (default: one per core);
    ``progress(n)`` as targets finish."""
    targets = planted_targets()
    start = time.perf_counter()
    rows = _run_workers(targets, device, seed, workers or cores(), progress)
    by_check: dict[str, dict[str, int]] = {}
    for row in rows:
        counts = by_check.setdefault(row["check"], {"found": 0, "total": 0})
        counts["found"] += row["found"]
        counts["total"] += 1
    return {
        "found": sum(row["found"] for row in rows),
        "total": len(targets),
        "seconds": round(time.perf_counter() - start, 2),
        "fuzz_examples_cap": FUZZ_EXAMPLES,
        "property_examples": PROPERTY_EXAMPLES,
        "property_cycles": PROPERTY_CYCLES,
        "by_check": by_check,
        "targets": rows,
        "source": "fresh",
        "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


_HARNESS = Path(__file__).resolve().parents[1]
_LIBRARY = _HARNESS.parent / "breakable_cudagraph"


def _source_digest() -> str:
    """A digest of the harness's and the library's source: the planted targets build on both."""
    digest = hashlib.sha256()
    for root in (_HARNESS, _LIBRARY):
        for path in sorted(root.rglob("*")):
            if path.suffix in (".py", ".cpp") and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(root.parent)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()


def cache_dir() -> Path:
    """``BCG_CACHE_DIR``, else ``$XDG_CACHE_HOME/breakable-cudagraph``, else ``~/.cache/...``."""
    if os.environ.get("BCG_CACHE_DIR"):
        return Path(os.environ["BCG_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "breakable-cudagraph"


def cache_path(kind: DeviceKind, seed: int) -> Path:
    """Where the evidence of this harness, torch, device kind (and GPU model), Python, seed
    and planted set is cached."""
    import torch

    gpu = torch.cuda.get_device_name() if kind == "cuda" else "simulator"
    key = json.dumps(
        [_source_digest(), torch.__version__, kind, gpu, platform.python_version(), seed,
         [p.name for p in planted_targets()]]
    )  # fmt: skip
    name = hashlib.sha256(key.encode()).hexdigest()[:24]
    return cache_dir() / "sensitivity" / f"{name}.json"


def _cached(path: Path) -> dict[str, Any] | None:
    try:
        measured = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return {**measured, "source": "cached"} if isinstance(measured, dict) else None


def _store(path: Path, measured: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(measured))
        partial.replace(path)  # whole or not at all, whoever else writes it
    except OSError:
        pass  # a cache that cannot be written costs the next run its time, nothing else


def summary_line(measured: dict[str, Any]) -> str:
    """``N of M found``, the line certify prints."""
    how = (
        f"cached, measured {measured['measured_at']} with this harness, torch and device"
        if measured.get("source") == "cached"
        else "measured now"
    )
    return (
        f"planted bugs: {measured['found']} of {measured['total']} found, each through the "
        f"check that must find it (same environment; {how})"
    )


def sensitivity_check(run: CertifyRun) -> CheckResult:
    """The measurement as a check of certify's table: its result is the certificate's
    ``sensitivity`` section and the table's sensitivity row. Under ``run.sensitivity ==
    "cached"`` a measurement of this environment is reused; ``fresh`` (and ``cached`` where
    none is) measures and caches it."""
    start = time.perf_counter()
    path = cache_path(run.kind, run.config.seed) if run.sensitivity != "off" else None
    measured = _cached(path) if path is not None and run.sensitivity == "cached" else None
    if measured is None:
        measured = measure(run.kind, run.config.seed, run.progress, run.schedule.workers)
        if path is not None:
            _store(path, measured)
    else:
        run.progress(measured["total"])
    return CheckResult(
        "sensitivity", measured["total"], time.perf_counter() - start, section=measured
    )
