"""What a check of ``certify`` gets and returns: a :class:`CertifyRun` in, a
:class:`CheckResult` out, and the :class:`Check` entry that names it in
:data:`verification.certify.checks.CHECKS`.

A check never writes files or prints: the certificate is built from the results.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from verification.certify.schedule import Schedule
from verification.devices import DeviceKind
from verification.findings import Finding, about_target, fails_certificate
from verification.fuzz import CampaignConfig
from verification.targets import Target
from verification.userops.programs import UserOp


@dataclass
class CertifyRun:
    """What every check gets: the campaign settings (``config``, holding the target loaded
    once with its contract resolved, and the device kind actually used), how the time budget
    is spent (``schedule``), the user ops of ``--ops`` (loaded once), and
    ``progress(advance)`` to move the progress bar."""

    config: CampaignConfig
    progress: Callable[[int], None] = lambda advance: None
    # ``--ops MODULE:SPEC``: the refs as given (for reproducer commands) and the loaded ops.
    op_specs: Sequence[str] = ()
    users: Sequence[UserOp] = ()
    # "off", "fresh" (measured now) or "cached" (measured now only where no evidence of this
    # harness, torch and device is cached).
    sensitivity: str = "off"
    mutants: int | None = None
    schedule: Schedule = field(default_factory=lambda: Schedule(None, None, None, 1, False))

    @property
    def target(self) -> Target:
        return self.config.target

    @property
    def kind(self) -> DeviceKind:
        return self.config.kind


@dataclass
class CheckResult:
    name: str
    examples: int
    seconds: float
    findings: list[Finding] = field(default_factory=list)
    # Free-form counts the check wants in the certificate (runs per op, break positions...).
    coverage: dict[str, Any] = field(default_factory=dict)
    reproducers: list[str] = field(default_factory=list)
    # A check whose result is a section of its own in the certificate (sensitivity) puts it
    # here; such a check is not listed among the checks.
    section: dict[str, Any] | None = None
    # Repetition cycles per example, for the checks that run them (the repetition property).
    cycles: int | None = None
    # Why the check did not apply to this target (it lacks the API checked); None: it did.
    not_applicable: str | None = None
    # The wall-clock budget the check ran under (None: its example budget alone).
    budget_s: float | None = None

    @property
    def verdict(self) -> str:
        """``fail`` on a finding that fails a certificate, ``explained`` when a finding about
        the target blames something other than it, else ``pass`` (checker notes, true of
        every target, leave the verdict alone)."""
        if any(fails_certificate(f.kind) for f in self.findings):
            return "fail"
        if self.not_applicable is not None:
            return "not applicable"
        return "explained" if any(about_target(f.kind) for f in self.findings) else "pass"


@dataclass(frozen=True)
class Check:
    """One row of certify's table, or several (``run`` returns a list: the property checks,
    which run side by side)."""

    name: str
    run: Callable[[CertifyRun], CheckResult | list[CheckResult]]
    # Examples the check expects to run, for the progress bar (None: unknown).
    budget: Callable[[CertifyRun], int | None] = lambda run: run.config.examples
    applies: Callable[[CertifyRun], bool] = lambda run: True
    # What the budget counts, for the progress bar.
    unit: str = "examples"
