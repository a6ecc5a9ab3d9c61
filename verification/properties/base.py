"""What every property check shares: its configuration, its findings and the hypothesis driver.

A check receives a :class:`CheckConfig` (target, device, budgets) and returns a
:class:`CheckResult`. A :class:`~verification.findings.Finding` (:func:`property_finding`)
carries a finding kind of :mod:`verification.findings`: ``target-bug`` fails the target;
``memory-held`` (memory kept alive without being wrong, with its figure), ``known-unsafe``
(a documented hazard the checker demonstrated), ``undecided`` (a question this run could not
answer) and ``skipped`` never do. A check collects
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

import torch
from hypothesis import strategies as st

from verification import bounds, breadcrumbs
from verification.causes import HUNG, Cause, cause_of, describe, raised_by_harness, within
from verification.devices import DeviceKind
from verification.findings import (
    HARNESS_ERROR,
    SKIPPED,
    TARGET_BUG,
    Finding,
)
from verification.programs import Program, programs
from verification.search import search, symptom
from verification.targets import Target
from verification.usable import left_over
from verification.usable import unusable as target_unusable


def property_finding(
    prop: str,
    kind: str,
    message: str,
    program: Program | None = None,
    seed: int | None = None,
    scenario: tuple[tuple[str, Any], ...] = (),
    cause: Cause | None = None,
) -> Finding:
    """A finding of property ``prop``; ``program`` is the (shrunk) example, if any; its cause
    is ``cause``, else the one ``message`` carries (a :class:`~verification.causes.Problem`)."""
    explained = cause if cause is not None else cause_of(message)
    return Finding(
        kind, prop, str(message), program=program, seed=seed, scenario=scenario, explained=explained
    )


@dataclass(frozen=True)
class Resume:
    """Where a check goes on in a fresh process, after a finding left the target unusable in
    the one before: the units of work (fixed scenarios, searches) ``done`` there, the examples
    ``spent`` of the search it stopped in, the finding keys (:func:`finding_key`) ``known``
    from there, and how many processes went before (``restarts``)."""

    done: int = 0
    spent: int = 0
    known: tuple[tuple[str, str, str], ...] = ()
    restarts: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "done": self.done,
            "spent": self.spent,
            "known": [list(k) for k in self.known],
            "restarts": self.restarts,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Resume:
        known = tuple((str(a), str(b), str(c)) for a, b, c in data.get("known", ()))
        return cls(int(data["done"]), int(data["spent"]), known, int(data["restarts"]))


# Fresh processes one check may take: each follows a finding that left the target unusable.
MAX_RESTARTS = 6


@dataclass
class CheckConfig:
    """Budgets of one check. ``examples`` is the hypothesis budget, ``cycles`` the repetition
    property's cycle count, ``seconds`` (None: none) the check's wall-clock budget, counted
    from when it starts. ``verdict_only`` asks only whether the check fails: findings are
    not shrunk and the check ends at its first failing one (the planted-bug evidence).
    ``resume`` says what an earlier process of this check already did; the check sets
    ``next_resume`` when it stops with work left for a fresh process."""

    target: Target
    kind: DeviceKind  # "cuda" or "sim"
    device: str  # the torch device tensors are allocated on
    examples: int
    seed: int = 0
    cycles: int = 100
    max_ops: int = 6
    max_breaks: int = 3
    resume: Resume = field(default_factory=Resume)
    next_resume: Resume | None = None
    seconds: float | None = None
    verdict_only: bool = False


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
    # Set when a finding left the target unusable with work left: a fresh process goes on.
    resume: Resume | None = None

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


class _Spent(BaseException):
    """Ends a search from inside an example: a bug found before struck again and left the
    target unusable. A BaseException, so that neither the search nor hypothesis takes it for
    a finding."""

    def __init__(self, why: str, spent: int) -> None:
        super().__init__(why)
        self.why = why
        self.spent = spent


# Why a verdict-only check stops: the answer is known.
VERDICT_ONLY_STOP = "verdict only: the check fails"


class Findings:
    """What one check found so far, each bug once: by kind and symptom, so that a fixed
    scenario and a drawn program showing the same symptom are one finding (a fault at the
    first capture_begin is reached by both).

    The check's work comes in units (fixed scenarios, searches), counted as they run. Once a
    failing finding leaves the target unusable, this process takes no more work, since
    whatever followed would report that leftover; the check's ``config.next_resume`` then says
    where a fresh process goes on (:class:`Resume`), so that no bug hides the ones after it.
    A fresh process skips the units done before it and treats the findings known from before
    as passes, stopping again if one of them leaves the target unusable once more."""

    def __init__(self, prop: str, config: CheckConfig) -> None:
        self.prop = prop
        self.config = config
        self.began = time.monotonic()
        self.examples = 0
        self.found: list[Finding] = []
        self.stopped: str | None = None
        self.unit = 0
        self.known = set(config.resume.known)
        config.next_resume = None

    @property
    def going(self) -> bool:
        return self.stopped is None

    def _runs_next(self) -> bool:
        """Counts the next unit of work; whether it runs in this process."""
        self.unit += 1
        return self.going and self.unit > self.config.resume.done

    def _stop(self, why: str, spent: int | None = None) -> None:
        """Stops here; a fresh process goes on after this unit, or (``spent`` examples into
        a search) within it."""
        self.stopped = why
        resume = self.config.resume
        if resume.restarts >= MAX_RESTARTS:
            return
        known = tuple(dict.fromkeys((*resume.known, *(finding_key(f) for f in self.found))))
        done = self.unit if spent is None else self.unit - 1
        self.config.next_resume = Resume(done, spent or 0, known, resume.restarts + 1)

    def _known(self, finding: Finding) -> bool:
        key = finding_key(finding)
        return key in self.known or any(finding_key(f) == key for f in self.found)

    def add(self, finding: Finding | None) -> None:
        if finding is None or not self.going:
            return
        known = self._known(finding)
        if not known:
            self.found.append(finding)
        if finding.fails and self.config.verdict_only:
            self.stopped = VERDICT_ONLY_STOP
        elif finding.fails:
            why = unusable(self.config)
            if why is not None:
                self._stop(why)

    def _left_by_earlier(self, left: str) -> None:
        """An earlier example or scenario that reported nothing left ``left`` behind: a bug
        of the target's that would otherwise go unreported (the state is only seen here)."""
        self.add(
            property_finding(
                self.prop,
                TARGET_BUG,
                within("an example of this check that found nothing left this behind: ", left),
            )
        )

    def step(self, make: Callable[[], Finding | None]) -> None:
        """Runs one fixed unit of work that makes its finding itself, and records it."""
        if not self._runs_next():
            return
        left = left_over(self.config.target)
        if left is not None:
            self._left_by_earlier(left)
            self.unit -= 1  # this unit did not run: the fresh process runs it
            self._stop(left)
            return
        self.examples += 1
        try:
            with bounds.bounded(f"{self.prop} unit {self.unit}"):
                found = make()
        except bounds.Hang as hang:
            found = hang_finding(self.prop, hang, seed=self.config.seed)
        except Exception as error:
            found = error_finding(self.prop, error)
        self.add(found)

    def fixed(self, problem: Callable[[CheckConfig], str | None]) -> None:
        """Runs one fixed scenario (no drawn example) and records its problem, if any."""

        def make() -> Finding | None:
            fn = problem.func if isinstance(problem, functools.partial) else problem
            try:
                with breadcrumbs.scenario(f"{self.prop} {fn.__name__}"):
                    with bounds.bounded(f"the scenario {fn.__name__}"):
                        found = problem(self.config)
            except bounds.Hang as hang:
                return hang_finding(
                    self.prop, hang, seed=self.config.seed, scenario=scenario_of(problem)
                )
            if found is None:
                return None
            # The seed too: a fixed scenario's model and values come from it.
            return property_finding(
                self.prop, TARGET_BUG, found, seed=self.config.seed, scenario=scenario_of(problem)
            )

        self.step(make)

    def search(
        self,
        strategy: st.SearchStrategy[Any],
        body: Callable[[Any], Finding | None],
        examples: int | None = None,
        key: Callable[[Finding], Any] = finding_key,
    ) -> None:
        """Runs ``body`` on drawn values for the budget; every distinct finding, shrunk."""
        if not self._runs_next():
            return
        resume = self.config.resume
        already = resume.spent if self.unit == resume.done + 1 else 0
        budget = (examples if examples is not None else self.config.examples) - already
        if budget <= 0:
            return
        # A drawn example that shows a fixed scenario's symptom, or one an earlier process
        # found, again is the same bug; if it left the target unusable again, stop here.
        known = {key(f) for f in self.found} | {k for k in self.known}
        calls = [0]
        shrinking = [False]

        def new_only(value: Any) -> Finding | None:
            # An example started on what an earlier one left would report the leftover as a
            # bug of its own (under its own point, place or program). Before any finding: stop
            # and go on fresh. After one, hypothesis is shrinking it on the state it left:
            # such an example cannot be judged, and the finding keeps its unshrunk example.
            left = left_over(self.config.target)
            if left is not None and not shrinking[0]:
                self._left_by_earlier(left)
                raise _Spent(left, already + calls[0])
            if left is not None:
                return None
            calls[0] += 1
            number = already + calls[0]
            try:
                with breadcrumbs.scenario(f"{self.prop} drawn example {number}"):
                    with bounds.bounded(f"drawn example {number}"):
                        finding = body(value)
            except bounds.Hang as hang:
                finding = hang_finding(self.prop, hang, _program_in(value), self.config.seed)
                if key(finding) in known:  # the same call hung again: the target is spent here
                    raise _Spent(hang.words(), number) from None
            if finding is not None:
                shrinking[0] = True
            if finding is None or key(finding) not in known:
                return finding
            if finding.fails:
                why = unusable(self.config)
                if why is not None:
                    raise _Spent(why, already + calls[0])
            return None

        seconds = self.config.seconds
        try:
            outcome = search(
                strategy,
                new_only,
                examples=budget,
                # A search taken up again draws anew: the same seed would draw what ran before.
                seed=self.config.seed + already,
                key=key,
                error_finding=lambda error: error_finding(self.prop, error),
                usable=lambda: unusable(self.config),
                # What the fixed scenarios left of the check's time.
                seconds=None if seconds is None else max(0.0, seconds - self._elapsed()),
                shrink=not self.config.verdict_only,
                max_findings=0 if self.config.verdict_only else 8,
                # Each try of a call that hangs costs the whole bound: reported as drawn.
                final=lambda finding: finding.hung,
            )
        except _Spent as spent:
            self.examples += calls[0]
            self._stop(spent.why, spent.spent)
            return
        self.examples += outcome.examples
        for finding in outcome.findings:
            if not self._known(finding):
                self.found.append(finding)
        if self.config.verdict_only and any(f.fails for f in self.found):
            self.stopped = VERDICT_ONLY_STOP
            return
        if outcome.stopped is not None:
            self._stop(outcome.stopped, already + outcome.examples)

    def _elapsed(self) -> float:
        return time.monotonic() - self.began

    def result(self) -> tuple[int, list[Finding]]:
        notes = []
        if self.stopped is not None:
            rest = (
                "the rest of the check ran in a fresh process"
                if self.config.next_resume is not None
                else "the rest of the check was skipped"
            )
            notes.append(
                property_finding(
                    self.prop,
                    SKIPPED,
                    f"{rest}: target unusable after its finding ({self.stopped})",
                )
            )
        return self.examples, self.found + notes


def _program_in(drawn: Any) -> Program | None:
    """The program among a drawn example's values, if it has one."""
    values = drawn if isinstance(drawn, tuple) else (drawn,)
    return next((v for v in values if isinstance(v, Program)), None)


def hang_finding(
    prop: str,
    hang: bounds.Hang,
    program: Program | None = None,
    seed: int | None = None,
    scenario: tuple[tuple[str, Any], ...] = (),
) -> Finding:
    """The ``target-bug`` finding of a call that did not return within the bound."""
    return property_finding(prop, TARGET_BUG, hang.words(), program, seed, scenario, HUNG)


def error_finding(prop: str, error: Exception) -> Finding:
    """An exception that escaped a check's code: a ``harness-error`` when the harness's own
    code raised it, else a ``target-bug``."""
    if raised_by_harness(error) and _caller_stream_capturing():
        # The checker's own CUDA call failed because a stream it did not leave capturing still
        # is: only the target's capture could have left it so.
        return property_finding(
            prop,
            TARGET_BUG,
            "the check could not go on: a capture left the caller's stream capturing, and "
            f"the check's next CUDA call raised {describe(error)}",
        )
    kind = HARNESS_ERROR if raised_by_harness(error) else TARGET_BUG
    return property_finding(prop, kind, f"the check raised {describe(error)}")


def _caller_stream_capturing() -> bool:
    try:
        return bool(torch.cuda.is_current_stream_capturing())
    except Exception:  # no device to ask
        return False


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
    except bounds.Hang as hang:  # a call outside the check's units of work
        examples, findings = 0, [hang_finding(prop, hang)]
    except Exception as error:
        examples, findings = 0, [error_finding(prop, error)]
    finally:
        gc.unfreeze()
    # Each bug once, whichever path found it: a container scenario and the fault points at
    # __enter__ can reach the same symptom through separate paths.
    once: dict[tuple[str, str, str], Finding] = {}
    for finding in findings:
        once.setdefault(finding_key(finding), finding)
    return CheckResult(prop, examples, time.perf_counter() - start, list(once.values()))
