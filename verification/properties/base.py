"""What every property check shares: its configuration, its findings and the hypothesis driver.

A check receives a :class:`CheckConfig` (target, device, budgets) and returns a
:class:`CheckResult`. A :class:`~verification.findings.Finding` (:func:`property_finding`)
carries a finding kind of :mod:`verification.findings`: ``target-bug`` fails the target;
``memory-held`` (memory kept alive without being wrong, with its figure), ``known-unsafe``
(a documented hazard the checker demonstrated) and ``skipped`` never do. A check collects
into :class:`Findings`, which runs fixed scenarios and the shared search driver
(:mod:`verification.search`) and keeps every distinct finding once.
"""

from __future__ import annotations

import functools
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from verification.causes import describe, raised_by_harness
from verification.findings import (
    HARNESS_ERROR,
    SKIPPED,
    TARGET_BUG,
    Finding,
)
from verification.programs import Program, programs
from verification.search import search, symptom
from verification.targets import Target
from verification.usable import unusable as target_unusable


def property_finding(
    prop: str,
    kind: str,
    message: str,
    program: Program | None = None,
    seed: int | None = None,
    scenario: tuple[tuple[str, Any], ...] = (),
) -> Finding:
    """A finding of property ``prop``; ``program`` is the (shrunk) example, if any."""
    return Finding(kind, prop, message, program=program, seed=seed, scenario=scenario)


@dataclass
class CheckConfig:
    """Budgets of one check. ``examples`` is the hypothesis budget, ``cycles`` the repetition
    property's cycle count."""

    target: Target
    kind: str  # "cuda" or "sim"
    device: str  # the torch device tensors are allocated on
    examples: int
    seed: int = 0
    cycles: int = 100
    max_ops: int = 6
    max_breaks: int = 3


@dataclass
class CheckResult:
    """``not_applicable`` says why the target was not checked (it lacks the API checked);
    such a result neither passes nor fails anything."""

    prop: str
    examples: int
    elapsed_s: float
    findings: list[Finding] = field(default_factory=list)
    not_applicable: str | None = None
    # Why the check did not run: an earlier check in this process left the target unusable.
    skipped: str | None = None

    @property
    def failed(self) -> bool:
        return any(f.fails for f in self.findings)


def program_strategy(
    config: CheckConfig, *, max_ops: int | None = None, ops: Any = None
) -> st.SearchStrategy[Program]:
    """The fuzzer's generator, under the target's break contract."""
    return programs(
        max_ops=max_ops or config.max_ops,
        max_breaks=config.max_breaks,
        ops=ops,
        contract=config.target.contract,
    )


def scenario_of(problem: Callable[..., Any]) -> tuple[tuple[str, Any], ...]:
    """The scenario entries naming a fixed scenario (a function of ``config``, or a partial of
    one), from which a reproducer copies its code."""
    args: tuple[Any, ...] = ()
    fn = problem
    if isinstance(problem, functools.partial):
        fn, args = problem.func, tuple(problem.args)
    return (("fixed", f"{fn.__module__}:{fn.__qualname__}"), ("args", args))


def finding_key(finding: Finding) -> tuple[str, str, str]:
    """What makes two findings of a check one bug: their kind and their symptom."""
    return finding.check, finding.kind, symptom(finding.message)


def unusable(config: CheckConfig) -> str | None:
    """Why the target cannot be used any more in this process, or None
    (:func:`verification.usable.unusable`)."""
    return target_unusable(config.target, config.device)


class Findings:
    """What one check found so far, each bug once: by kind and symptom, so that a fixed
    scenario and a drawn program showing the same symptom are one finding (on the H200 a
    fault at the first capture_begin showed twice otherwise). Once a failing finding leaves
    the target unusable, the check takes no more work: whatever followed would report that
    leftover, not a bug of its own."""

    def __init__(self, prop: str, config: CheckConfig) -> None:
        self.prop = prop
        self.config = config
        self.examples = 0
        self.found: list[Finding] = []
        self.stopped: str | None = None

    @property
    def going(self) -> bool:
        return self.stopped is None

    def add(self, finding: Finding | None) -> None:
        if finding is None or not self.going:
            return
        if any(finding_key(f) == finding_key(finding) for f in self.found):
            return
        self.found.append(finding)
        if finding.fails:
            self.stopped = unusable(self.config)

    def fixed(self, problem: Callable[[CheckConfig], str | None]) -> None:
        """Runs one fixed scenario (no drawn example) and records its problem, if any."""
        if not self.going:
            return
        self.examples += 1
        try:
            found = problem(self.config)
        except Exception as error:
            self.add(error_finding(self.prop, error))
            return
        if found is not None:
            self.add(property_finding(self.prop, TARGET_BUG, found, scenario=scenario_of(problem)))

    def search(
        self,
        strategy: st.SearchStrategy[Any],
        body: Callable[[Any], Finding | None],
        examples: int | None = None,
        key: Callable[[Finding], Any] = finding_key,
    ) -> None:
        """Runs ``body`` on drawn values for the budget; every distinct finding, shrunk."""
        if not self.going:
            return
        # A drawn example that shows a fixed scenario's symptom again is the same bug.
        known = {key(f) for f in self.found}

        def new_only(value: Any) -> Finding | None:
            finding = body(value)
            return None if finding is not None and key(finding) in known else finding

        outcome = search(
            strategy,
            new_only,
            examples=examples if examples is not None else self.config.examples,
            seed=self.config.seed,
            key=key,
            error_finding=lambda error: error_finding(self.prop, error),
            usable=lambda: unusable(self.config),
        )
        self.examples += outcome.examples
        for finding in outcome.findings:
            self.add(finding)
        if outcome.stopped is not None:
            self.stopped = outcome.stopped

    def result(self) -> tuple[int, list[Finding]]:
        notes = []
        if self.stopped is not None:
            notes.append(
                property_finding(
                    self.prop,
                    SKIPPED,
                    f"the rest of the check was skipped: target unusable after its finding "
                    f"({self.stopped})",
                )
            )
        return self.examples, self.found + notes


def error_finding(prop: str, error: Exception) -> Finding:
    """An exception that escaped a check's code: a ``harness-error`` when the harness's own
    code raised it, else a ``target-bug``."""
    kind = HARNESS_ERROR if raised_by_harness(error) else TARGET_BUG
    return property_finding(prop, kind, f"the check raised {describe(error)}")


def timed(prop: str, run: Callable[[], tuple[int, list[Finding]]]) -> CheckResult:
    """Runs a check with the heap so far frozen: the checks collect garbage often, and a
    full collection walks all of torch and hypothesis (a second each on a busy machine).

    An exception that escapes the check ends it with one finding instead of a traceback: a
    ``harness-error`` when the harness's own code raised it, else a ``target-bug``
    (``breakable-cuda-graphs`` 0.1.0 asserts inside some breaks).
    """
    start = time.perf_counter()
    gc.collect()
    gc.freeze()
    try:
        examples, findings = run()
    except Exception as error:
        examples, findings = 0, [error_finding(prop, error)]
    finally:
        gc.unfreeze()
    # Each bug once, whichever path found it: on the H200 a container scenario and the fault
    # points at __enter__ reported the same symptom twice through separate paths.
    once: dict[tuple[str, str, str], Finding] = {}
    for finding in findings:
        once.setdefault(finding_key(finding), finding)
    return CheckResult(prop, examples, time.perf_counter() - start, list(once.values()))
