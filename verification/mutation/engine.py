"""Runs a mutation campaign: cosmic-ray enumerates and applies mutants, stages judge them.

Every mutant is applied to a worker's own scratch copy of the target's package (cosmic-ray
restores the file afterwards), and each stage runs in a subprocess whose ``PYTHONPATH`` puts
that copy first. Before any mutant runs, the unmutated copy must pass every stage (this also
sets the timeouts) and a copy whose target fails to import must fail every stage, which
proves the stages really load the scratch copy and not an installed target.
"""

from __future__ import annotations

import difflib
import functools
import os
import queue
import random
import shutil
import signal
import subprocess
import tempfile
import time
import types
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import verification
from verification.devices import DeviceKind
from verification.errors import UsageError
from verification.mutation.equivalence import equivalence_hint
from verification.mutation.operators import selected
from verification.mutation.source import TargetSource, find_source
from verification.mutation.stages import PYTHON, Stage, build_stages

if TYPE_CHECKING:
    from cosmic_ray.work_item import MutationSpec


@functools.cache
def _cosmic_ray() -> types.SimpleNamespace | None:
    """cosmic-ray's parts, imported on first use: an optional extra, and a tenth of a second
    (with SQLAlchemy) that every other command would pay at start-up. None when missing."""
    try:
        import cosmic_ray.plugins
        from cosmic_ray.commands.init import init
        from cosmic_ray.mutating import use_mutation
        from cosmic_ray.work_db import WorkDB, use_db
        from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult
    except ImportError:  # pragma: no cover - depends on the environment
        return None
    return types.SimpleNamespace(
        plugins=cosmic_ray.plugins,
        init=init,
        use_mutation=use_mutation,
        WorkDB=WorkDB,
        use_db=use_db,
        TestOutcome=TestOutcome,
        WorkerOutcome=WorkerOutcome,
        WorkResult=WorkResult,
    )


_CANARY = 'raise ImportError("mutation canary: the scratch copy of the target was loaded")\n'


@dataclass
class MutationConfig:
    """What to mutate and how. ``target`` is a module name: each mutant is imported afresh in
    the children that judge it. ``kind`` is the resolved device kind (``sim`` or ``cuda``).
    ``budget`` samples that many mutants (None: all of them)."""

    target: str
    kind: DeviceKind = "sim"
    budget: int | None = None
    jobs: int = 1
    seed: int = 0
    examples: int = 100
    unit_tests: str | None = None
    harness: bool = True
    # Only mutants on these (file relative to the copy's root, line) places; empty: all.
    lines: tuple[tuple[str, int], ...] = ()
    session: Path | None = None
    progress: Callable[[str], None] | None = None
    # For a progress bar: ``on_total(n)`` once the mutants are chosen, ``on_judged(1)`` after each.
    on_total: Callable[[int], None] = lambda total: None
    on_judged: Callable[[int], None] = lambda advance: None


@dataclass
class Mutant:
    """One applied mutant and its verdict; ``killed_by`` is None for a survivor."""

    job_id: str
    file: str
    line: int
    operator: str
    occurrence: int
    diff: str = ""
    killed_by: str | None = None
    hint: str | None = None

    @property
    def label(self) -> str:
        return f"{self.file}:{self.line} {self.operator}#{self.occurrence}"


@dataclass
class MutationResult:
    target: str
    kind: DeviceKind
    stages: list[str]
    available: int
    mutants: list[Mutant] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def killed(self) -> list[Mutant]:
        return [m for m in self.mutants if m.killed_by is not None]

    @property
    def survivors(self) -> list[Mutant]:
        return [m for m in self.mutants if m.killed_by is None]

    @property
    def score(self) -> float:
        return len(self.killed) / len(self.mutants) if self.mutants else 1.0


def _environment(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    # The scratch copy first; the harness's own package after it, for checkouts that are not
    # installed. PYTHONSAFEPATH keeps ``python -m`` from putting the cwd (which may hold the
    # real target) ahead of both; PYTHONDONTWRITEBYTECODE keeps stale bytecode out of copies.
    harness_root = str(Path(verification.__file__).resolve().parents[1])
    parts = [str(root), harness_root, env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in parts if p)
    env["PYTHONSAFEPATH"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run(command: list[str], env: dict[str, str], timeout: float) -> tuple[int | None, str]:
    """Exit status (None on timeout) and the output's tail; the whole process group dies."""
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        output, _ = process.communicate(timeout=timeout)
        return process.returncode, output.decode(errors="replace")[-2000:]
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return None, ""


class _Worker:
    """A scratch copy of the target plus the stages with their settings and timeouts."""

    def __init__(self, source: TargetSource, root: Path, stages: list[Stage], settings: dict):
        self.root = source.copy_to(root)
        self.env = _environment(self.root)
        self.stages = stages
        self.settings = settings
        self.timeouts: dict[str, float] = {}

    def first_failure(self, default_timeout: float = 1800.0) -> tuple[str | None, str]:
        """The name of the first stage that fails (``timeout: name`` if it hangs), or None."""
        for stage in self.stages:
            timeout = self.timeouts.get(stage.name, default_timeout)
            status, output = _run(stage.command(**self.settings), self.env, timeout)
            if status is None:
                return f"timeout: {stage.name}", output
            if status != 0:
                return stage.name, output
        return None, ""

    def calibrate(self) -> None:
        """Runs every stage on the unmutated copy; each must pass, and sets its timeout."""
        for stage in self.stages:
            start = time.monotonic()
            status, output = _run(stage.command(**self.settings), self.env, 1800.0)
            seconds = time.monotonic() - start
            if status != 0:
                last = output.strip().splitlines()[-1:] or ["(no output)"]
                raise UsageError(
                    f"stage {stage.name!r} fails on the unmutated target (exit {status}): {last[0]}"
                )
            self.timeouts[stage.name] = 3 * seconds + 30


def _enumerate(source: TargetSource, root: Path, session: Path) -> list[MutationSpec]:
    paths = [root / f for f in source.files]
    cr = _cosmic_ray()
    with cr.use_db(str(session), cr.WorkDB.Mode.create) as db:
        selection = {n: {} for n in cr.plugins.operator_names() if selected(n)}
        cr.init(paths, db, {})
        keep = [item for item in db.work_items if item.mutations[0].operator_name in selection]
    specs = [item.mutations[0] for item in keep]
    return sorted(specs, key=lambda s: (str(s.module_path), s.start_pos, s.operator_name))


def _place(spec: MutationSpec, root: Path) -> tuple[str, int]:
    return str(Path(spec.module_path).relative_to(root)), spec.start_pos[0]


def _job_ids(session: Path) -> dict[tuple[str, str, int], str]:
    cr = _cosmic_ray()
    with cr.use_db(str(session), cr.WorkDB.Mode.open) as db:
        return {
            (str(m.module_path), m.operator_name, m.occurrence): item.job_id
            for item in db.work_items
            for m in item.mutations
        }


def _check_canary(source: TargetSource, root: Path, stages: list[Stage], settings: dict) -> None:
    worker = _Worker(source, root, stages, settings)
    target_file = root / source.files[0] if len(source.files) == 1 else None
    if target_file is None:
        package = source.name.replace(".", "/")
        target_file = root / package / "__init__.py"
    target_file.write_text(_CANARY + target_file.read_text())
    for stage in stages:
        status, _ = _run(stage.command(**settings), worker.env, 600.0)
        if status == 0:
            raise UsageError(
                f"stage {stage.name!r} passes on a target that cannot import, so it does not "
                "load the scratch copy; run it without putting the real target ahead of "
                "PYTHONPATH (pytest: use --import-mode=importlib or append)"
            )


def _diff(before: str, after: str, name: str) -> str:
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), name, name, n=1
    )
    return "".join(line for line in lines if not line.startswith(("---", "+++")))


def _judge(worker: _Worker, spec: MutationSpec, relative: str) -> Mutant | None:
    cr = _cosmic_ray()
    operator = cr.plugins.get_operator(spec.operator_name)()
    path = worker.root / relative
    with cr.use_mutation(path, operator, spec.occurrence) as (before, after):
        if after is None:
            return None
        killed_by, _ = worker.first_failure()
    short = spec.operator_name.rsplit("/", 1)[-1]
    mutant = Mutant(
        "", relative, spec.start_pos[0], short, spec.occurrence, _diff(before, after, relative)
    )
    mutant.killed_by = killed_by
    if killed_by is None:
        mutant.hint = equivalence_hint(short, after.splitlines()[spec.start_pos[0] - 1], spec)
    return mutant


def require_cosmic_ray() -> None:
    """A usage error unless cosmic-ray is installed: checked before any work starts."""
    if _cosmic_ray() is None:
        raise UsageError(
            "mutation testing needs cosmic-ray: pip install 'breakable-cudagraph[mutation]'"
        )


def run_mutation(config: MutationConfig) -> MutationResult:
    """Runs the campaign; raises UsageError for a target or stage that cannot be used."""
    require_cosmic_ray()
    source = find_source(config.target)
    stages = build_stages(config.unit_tests, config.harness)
    if not stages:
        raise UsageError("nothing to run against the mutants: no harness and no --unit-tests")
    say = config.progress or (lambda text: None)
    settings = {
        "python": PYTHON,
        "target": config.target,
        "device": config.kind,
        "examples": config.examples,
        "seed": config.seed,
    }
    start = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="bcg-mutate-"))
    try:
        session = config.session or scratch / "session.sqlite"
        session.parent.mkdir(parents=True, exist_ok=True)
        enum_root = source.copy_to(scratch / "enumerate")
        specs = _enumerate(source, enum_root, session)
        ids = _job_ids(session)
        if config.lines:
            wanted = set(config.lines)
            specs = [s for s in specs if _place(s, enum_root) in wanted]
            if not specs:
                raise UsageError(f"no mutant of {config.target} lies on {sorted(wanted)}")
        available = len(specs)
        if config.budget is not None and config.budget < available:
            specs = random.Random(config.seed).sample(specs, config.budget)
        workers = [
            _Worker(source, scratch / f"worker{i}", stages, settings) for i in range(config.jobs)
        ]
        say(f"mutate: {len(specs)} of {available} mutants, stages: {[s.name for s in stages]}")
        config.on_total(len(specs))
        workers[0].calibrate()
        for worker in workers[1:]:
            worker.timeouts = dict(workers[0].timeouts)
        _check_canary(source, scratch / "canary", stages, settings)
        result = MutationResult(config.target, config.kind, [s.name for s in stages], available)
        idle: queue.Queue[_Worker] = queue.Queue()
        for worker in workers:
            idle.put(worker)

        def judge(spec: MutationSpec) -> Mutant | None:
            worker = idle.get()
            try:
                relative = str(Path(spec.module_path).relative_to(enum_root))
                mutant = _judge(worker, spec, relative)
            finally:
                idle.put(worker)
                config.on_judged(1)
            if mutant is not None:
                mutant.job_id = ids[(str(spec.module_path), spec.operator_name, spec.occurrence)]
                verdict = f"killed by {mutant.killed_by}" if mutant.killed_by else "SURVIVED"
                say(f"  {mutant.label}: {verdict}")
            return mutant

        with ThreadPoolExecutor(config.jobs) as pool:
            mutants = [m for m in pool.map(judge, specs) if m is not None]
        result.mutants = sorted(mutants, key=lambda m: (m.file, m.line, m.operator, m.occurrence))
        _record(session, result)
        result.seconds = time.monotonic() - start
        return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _record(session: Path, result: MutationResult) -> None:
    """Stores verdicts in the cosmic-ray session, so ``cr-report`` and ``cr-html`` read it."""
    cr = _cosmic_ray()
    with cr.use_db(str(session), cr.WorkDB.Mode.open) as db:
        for mutant in result.mutants:
            killed = mutant.killed_by is not None
            outcome = cr.TestOutcome.KILLED if killed else cr.TestOutcome.SURVIVED
            db.set_result(
                mutant.job_id,
                cr.WorkResult(
                    output=mutant.killed_by or "",
                    diff=mutant.diff,
                    test_outcome=outcome,
                    worker_outcome=cr.WorkerOutcome.NORMAL,
                ),
            )
