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
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from verification.certify import sensitivity
from verification.certify.mutation_check import mutation_check
from verification.certify.ops_check import ops_check
from verification.certify.property_check import certify_budget, certify_properties
from verification.certify.run import CertifyRun, Check, CheckResult
from verification.fuzz import CampaignResult, run_campaign
from verification.properties import PROPERTIES


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
