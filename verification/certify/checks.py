"""The checks ``certify`` runs, as one table: :data:`CHECKS` lists every one in the order
they run, sensitivity and mutation included; adding a check is adding one :class:`Check`.

Each takes a :class:`~verification.certify.run.CertifyRun` and returns a
:class:`~verification.certify.run.CheckResult` (the property checks, which run side by side,
a list of them); :func:`run_checks` runs those that apply. Where the run's schedule is
concurrent (a GPU host), the checks marked ``beside`` start first, in threads that wait on
their child processes, and the others run meanwhile in this process.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from verification import bounds
from verification.certify import sensitivity
from verification.certify.mutation_check import mutation_check
from verification.certify.ops_check import ops_check
from verification.certify.run import CertifyRun, Check, CheckResult
from verification.fuzz import CampaignResult, run_campaign
from verification.properties import PROPERTIES
from verification.properties.processes import (
    CYCLING_PROPERTIES,
    DEFAULT_CYCLES,
    run_forked,
    run_in_child,
    run_properties,
)


def fuzz_check(run: CertifyRun) -> CheckResult:
    """The differential fuzz campaign of :mod:`verification.fuzz`, within the schedule's time
    for it."""
    start = time.perf_counter()
    config = dataclasses.replace(run.config, seconds=run.schedule.fuzz_s)
    result: CampaignResult = run_campaign(config, progress=run.progress)
    return CheckResult(
        "fuzz",
        result.examples,
        time.perf_counter() - start,
        list(result.findings),
        dict(result.coverage),
        list(result.reproducers),
        budget_s=run.schedule.fuzz_s,
    )


# Under a time budget the example counts are caps that time, not they, should reach.
BUDGETED_EXAMPLES = 100_000


def certify_budget(run: CertifyRun) -> tuple[int, int]:
    """Examples and repetition cycles per property under certify's settings."""
    if run.schedule.property_s is not None:
        examples = BUDGETED_EXAMPLES
    else:
        examples = max(5, (run.config.examples or 25) // 10)
    # 10,000 cycles on a GPU, whose caching allocator absorbs a small leak for a while; the
    # simulator's allocator shows any per-cycle leak in 1,000.
    long_run = (run.config.examples or 0) >= 2000 and run.schedule.property_s is None
    cycles = (10_000 if run.kind == "cuda" else 1_000) if long_run else DEFAULT_CYCLES
    return examples, cycles


def _child_argv(run: CertifyRun, name: str, examples: int, cycles: int) -> list[str]:
    argv = ["check", name, "--target", run.target.name, "--device", "cuda"]
    argv += ["--examples", str(examples), "--cycles", str(cycles)]
    argv += ["--seed", str(run.config.seed), "--hang-seconds", f"{bounds.current():g}"]
    if run.schedule.property_s is not None:
        argv += ["--budget", f"{run.schedule.property_s:.1f}"]
    if run.config.contract:
        argv += ["--contract", str(run.config.contract)]
    return argv


def certify_properties(run: CertifyRun) -> list[CheckResult]:
    """Every property as one row of certify's table each (``verification.certify.checks``),
    ``run.schedule.jobs`` at a time, each in a process of its own so that no check sees
    another's leftovers."""
    chosen = list(PROPERTIES)
    examples, cycles = certify_budget(run)
    seconds = run.schedule.property_s
    # A target that is a module of its name is imported by a child, so that a crash ends the
    # child, not certify; one built in this process runs here.
    by_name = sys.modules.get(run.target.name) is run.target.module
    if run.kind == "cuda" and by_name:
        with ThreadPoolExecutor(max_workers=run.schedule.jobs) as pool:
            argvs = [_child_argv(run, name, examples, cycles) for name in chosen]
            results = list(pool.map(run_in_child, chosen, argvs))
    elif run.kind == "sim":
        results = run_forked(
            chosen, run.target, run.kind, examples, run.config.seed, cycles,
            run.schedule.jobs, seconds=seconds,
        )  # fmt: skip
    else:
        results = run_properties(
            "all", run.target, run.kind, examples, run.config.seed, cycles, seconds=seconds
        )
    rows = []
    for result in results:
        run.progress(result.examples)
        rows.append(
            CheckResult(
                result.prop,
                result.examples,
                result.elapsed_s,
                list(result.findings),
                cycles=cycles if result.prop in CYCLING_PROPERTIES else None,
                not_applicable=result.not_applicable,
                budget_s=seconds,
            )
        )
    return rows


# The checks that run in child processes, and so beside the others on a GPU host.
BESIDE = ("properties", "sensitivity")

CHECKS: list[Check] = [
    Check("fuzz", fuzz_check),
    Check("ops", ops_check, applies=lambda run: bool(run.users)),
    # One row per property, in the order of verification.properties.PROPERTIES.
    Check(
        "properties",
        certify_properties,
        budget=lambda run: certify_budget(run)[0] * len(PROPERTIES),
    ),
    Check(
        "sensitivity",
        sensitivity.sensitivity_check,
        budget=lambda run: len(sensitivity.planted_targets()),
        unit="targets",
        applies=lambda run: run.sensitivity != "off",
    ),
    Check(
        "mutation",
        mutation_check,
        budget=lambda run: run.mutants,
        unit="mutants",
        applies=lambda run: bool(run.mutants),
    ),
]


def run_checks(
    run: CertifyRun,
    on_check: Callable[[str, int | None, str], None] = lambda *announced: None,
    on_result: Callable[[CheckResult], None] = lambda result: None,
) -> list[CheckResult]:
    """Runs every check that applies; returns their results in the order of :data:`CHECKS`.
    ``on_check(name, budget, unit)`` announces each as it starts, ``on_result`` each result
    (one per row) as it ends."""
    chosen = [check for check in CHECKS if check.applies(run)]
    beside = [c for c in chosen if run.schedule.concurrent and c.name in BESIDE]
    started: dict[str, Future[CheckResult | list[CheckResult]]] = {}
    by_name: dict[str, list[CheckResult]] = {}
    with ThreadPoolExecutor(max_workers=max(1, len(beside))) as pool:
        for check in beside:
            on_check(check.name, check.budget(run), check.unit)
            started[check.name] = pool.submit(check.run, run)
        for check in chosen:
            if check.name in started:
                continue
            on_check(check.name, check.budget(run), check.unit)
            by_name[check.name] = _rows(check.run(run))
            for result in by_name[check.name]:
                on_result(result)
        for name, future in started.items():
            by_name[name] = _rows(future.result())
            for result in by_name[name]:
                on_result(result)
    return [result for check in chosen for result in by_name[check.name]]


def _rows(outcome: CheckResult | list[CheckResult]) -> list[CheckResult]:
    return outcome if isinstance(outcome, list) else [outcome]
