"""What every property check shares: its configuration, its findings and the hypothesis driver.

A check receives a :class:`CheckConfig` (target, device, budgets) and returns a
:class:`CheckResult`. A :class:`~verification.findings.Finding` (:func:`property_finding`) carries a finding kind of
:mod:`verification.findings`: ``target-bug`` fails the target; ``memory-held`` (memory kept alive without being wrong, with its figure) and
``known-unsafe`` (a documented hazard the checker demonstrated), never do. :func:`search` runs hypothesis until a failing finding and
shrinks it.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.errors import FlakyFailure

from verification.findings import (
    HARNESS_ERROR,
    TARGET_BUG,
    Finding,
)
from verification.programs import Program, programs
from verification.targets import Target


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

    @property
    def failed(self) -> bool:
        return any(f.fails for f in self.findings)


class Found(Exception):
    """Raised inside a hypothesis example so that hypothesis shrinks the finding."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(finding.summary())
        self.finding = finding


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        database=None,
        deadline=None,
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
        phases=[p for p in Phase if p is not Phase.explain],
    )


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


def search(
    config: CheckConfig,
    strategy: st.SearchStrategy[Any],
    body: Callable[[Any], Finding | None],
    examples: int | None = None,
) -> tuple[int, Finding | None]:
    """Runs ``body`` on drawn values until it returns a failing finding; (examples, finding)."""
    counter = [0]

    @hypothesis_seed(config.seed)
    @_settings(examples if examples is not None else config.examples)
    @given(strategy)
    def example(value: Any) -> None:
        counter[0] += 1
        finding = body(value)
        if finding is not None:
            raise Found(finding)

    try:
        example()
    except Found as found:
        return counter[0], found.finding
    except FlakyFailure as flaky:
        found = [e for e in flaky.exceptions if isinstance(e, Found)]
        if not found:
            raise
        return counter[0], found[0].finding
    return counter[0], None


_HARNESS = Path(__file__).resolve().parent.parent
# Frames that only pass an error on: CUDA's stand-in and the libraries everyone calls.
_PASSING_ON = (
    _HARNESS / "sim",
    Path(torch.__file__).resolve().parent,
    Path(contextlib.__file__).resolve().parent,
)


def _raised_by_harness(error: BaseException) -> bool:
    """Whether the innermost frame of ``error`` that is neither torch, the standard library
    nor the simulator lies in the harness (anything else is the target's code or its
    dependencies: a wrapped peer, a planted target, user ops)."""
    innermost = None
    tb = error.__traceback__
    while tb is not None:
        path = Path(tb.tb_frame.f_code.co_filename).resolve()
        if not any(base in path.parents for base in _PASSING_ON):
            innermost = path
        tb = tb.tb_next
    return innermost is not None and _HARNESS in innermost.parents


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
        kind = HARNESS_ERROR if _raised_by_harness(error) else TARGET_BUG
        examples, findings = 0, [property_finding(prop, kind, f"the check raised {error!r}")]
    finally:
        gc.unfreeze()
    return CheckResult(prop, examples, time.perf_counter() - start, findings)
