"""The checks ``certify`` runs, as a table: each one takes a :class:`CertifyRun` and returns a
:class:`CheckResult` (examples, time, findings, coverage).

:data:`CHECKS` lists them in the order they run; a new check (property checks, registered
ops) plugs in by appending one :class:`Check`. A check never writes files or prints: the
certificate is built from the results.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from verification.findings import about_target, fails_certificate
from verification.fuzz import CampaignConfig, CampaignResult, run_campaign
from verification.ops.spec import OpSpec
from verification.oracle import Finding
from verification.targets import Target


@dataclass
class CertifyRun:
    """What every check gets: the campaign settings, the loaded target (its contract
    resolved), the device kind actually used, the ops (None: the catalog), and
    ``progress(advance)`` to move the progress bar by a number of examples."""

    config: CampaignConfig
    target: Target
    device: str
    ops: Sequence[OpSpec] | None = None
    progress: Callable[[int], None] = lambda advance: None
    # ``--ops MODULE:SPEC``: user break ops the ``ops`` check fuzzes.
    op_specs: Sequence[str] = ()


@dataclass
class CheckResult:
    name: str
    examples: int
    seconds: float
    findings: list[Finding] = field(default_factory=list)
    # Free-form counts the check wants in the certificate (runs per op, break positions...).
    coverage: dict[str, Any] = field(default_factory=dict)
    reproducers: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """``fail`` on a finding that fails a certificate, ``explained`` when a finding about
        the target blames something other than it, else ``pass`` (checker notes, true of
        every target, leave the verdict alone)."""
        if any(fails_certificate(f.kind) for f in self.findings):
            return "fail"
        return "explained" if any(about_target(f.kind) for f in self.findings) else "pass"


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[CertifyRun], CheckResult]
    # Examples the check expects to run, for the progress bar (None: unknown).
    budget: Callable[[CertifyRun], int | None] = lambda run: run.config.examples
    applies: Callable[[CertifyRun], bool] = lambda run: True


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


def _ops_check(run: CertifyRun) -> CheckResult:
    from verification.certify.ops_check import ops_check  # it imports this module

    return ops_check(run)


def properties_check(run: CertifyRun) -> CheckResult:
    """Every property of :mod:`verification.properties` (``check all``)."""
    from verification.commands.check import certify_check

    return certify_check(run)


CHECKS: list[Check] = [
    Check("fuzz", fuzz_check),
    Check("ops", _ops_check, applies=lambda run: bool(run.op_specs)),
    Check("properties", properties_check, budget=lambda run: None),
]
