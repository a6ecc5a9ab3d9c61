"""The checks ``certify`` runs, as one table: :data:`CHECKS` lists every one in the order
they run, sensitivity and mutation included; adding a check is adding one :class:`Check`.

Each takes a :class:`~verification.certify.run.CertifyRun` and returns a
:class:`~verification.certify.run.CheckResult`; :func:`run_checks` runs those that apply.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from verification.certify import sensitivity
from verification.certify.mutation_check import mutation_check
from verification.certify.ops_check import ops_check
from verification.certify.property_check import properties_check
from verification.certify.run import CertifyRun, Check, CheckResult
from verification.fuzz import CampaignResult, run_campaign


def fuzz_check(run: CertifyRun) -> CheckResult:
    """The differential fuzz campaign of :mod:`verification.fuzz`."""
    start = time.perf_counter()
    result: CampaignResult = run_campaign(run.config, progress=run.progress)
    return CheckResult(
        "fuzz",
        result.examples,
        time.perf_counter() - start,
        list(result.findings),
        dict(result.coverage),
        list(result.reproducers),
    )


CHECKS: list[Check] = [
    Check("fuzz", fuzz_check),
    Check("ops", ops_check, applies=lambda run: bool(run.users)),
    Check("properties", properties_check, budget=lambda run: None),
    Check(
        "sensitivity",
        sensitivity.sensitivity_check,
        budget=lambda run: len(sensitivity.planted_targets()),
        applies=lambda run: run.sensitivity,
    ),
    Check(
        "mutation",
        mutation_check,
        budget=lambda run: run.mutants,
        applies=lambda run: bool(run.mutants),
    ),
]


def run_checks(
    run: CertifyRun, on_check: Callable[[str, int | None], None] = lambda name, budget: None
) -> list[CheckResult]:
    """Runs every check that applies, in order; ``on_check(name, budget)`` announces each."""
    results = []
    for check in CHECKS:
        if not check.applies(run):
            continue
        on_check(check.name, check.budget(run))
        results.append(check.run(run))
    return results
