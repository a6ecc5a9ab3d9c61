"""The one hypothesis driver of fuzz campaigns and property checks: every distinct finding, shrunk.

:func:`search` runs a body on drawn values within a budget of generated examples and, when
given, of wall-clock seconds. When the body returns a finding, hypothesis shrinks it; the
search then goes on, in rounds, treating findings of a symptom already found as passes, until
the budget is spent, so each symptom is reported once, by its shrunk example. A ``usable``
probe between rounds stops the search when a finding left the target unusable, since every
later example would only report that leftover.

A time budget never loses a finding: once it is spent no new example starts, a finding being
shrunk keeps shrinking up to :data:`SHRINK_GRACE` times the budget, and past that the smallest
failing example so far is reported.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.database import ExampleDatabase

from verification.errors import raise_if_interrupted

F = TypeVar("F")
# How far past its time budget a search may go on shrinking a finding it already holds.
SHRINK_GRACE = 1.5


def symptom(message: str) -> str:
    """A message's first line with numbers and addresses masked: findings that differ only in
    sizes, indices or values are one symptom."""
    first = message.splitlines()[0] if message else ""
    return re.sub(r"0x[0-9a-fA-F]+|\d+(\.\d+)?(e[-+]?\d+)?", "#", first)


class _OutOfTime(BaseException):
    """Ends a hypothesis run when the time budget is spent; hypothesis passes exceptions that
    are not ``Exception`` through without shrinking or reporting them."""


class _Final(BaseException):
    """Ends a hypothesis run at a finding reported as drawn, never shrunk (``final``);
    ``again`` when its key was found before."""

    def __init__(self, finding: Any, again: bool) -> None:
        super().__init__(str(finding))
        self.finding = finding
        self.again = again


class _Found(Exception):
    """Raised inside a hypothesis example so that hypothesis shrinks the finding."""

    def __init__(self, finding: Any) -> None:
        super().__init__(str(finding))
        self.finding = finding


@dataclass
class Outcome(Generic[F]):
    """``examples``: calls of the body, shrinking included; ``findings``: one per symptom, in
    the order found; ``stopped``: why the search ended early (the target left unusable)."""

    examples: int = 0
    findings: list[F] = field(default_factory=list)
    stopped: str | None = None
    # Whether the time budget ended the search before its example budget.
    out_of_time: bool = False


def _settings(examples: int, database: ExampleDatabase | None, shrink: bool) -> settings:
    skipped = {Phase.explain} if shrink else {Phase.explain, Phase.shrink}
    return settings(
        max_examples=examples,
        database=database,
        deadline=None,
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
        # The explain phase only annotates the report we do not print, and its internal
        # checks trip over programs whose length depends on earlier choices.
        phases=[p for p in Phase if p not in skipped],
    )


def _found_in(error: BaseException) -> _Found | None:
    """The finding an escaped exception carries: itself, or inside a group (hypothesis raises
    a ``FlakyFailure`` group when a failure does not repeat, as a racy target's may not)."""
    if isinstance(error, _Found):
        return error
    for inner in getattr(error, "exceptions", ()):  # an exception group (Python 3.10 too)
        if isinstance(inner, BaseException):
            found = _found_in(inner)
            if found is not None:
                return found
    return None


def search(
    strategy: st.SearchStrategy[Any],
    body: Callable[[Any], F | None],
    *,
    examples: int,
    seed: int,
    key: Callable[[F], Hashable],
    error_finding: Callable[[Exception], F] | None = None,
    usable: Callable[[], str | None] | None = None,
    database: ExampleDatabase | None = None,
    max_findings: int = 8,
    seconds: float | None = None,
    shrink: bool = True,
    final: Callable[[F], bool] | None = None,
) -> Outcome[F]:
    """Runs ``body`` on values of ``strategy`` until ``examples`` have been generated; returns
    each distinct finding (by ``key``) once, shrunk.

    Each round is one hypothesis run; a round ends at its first new finding, which hypothesis
    shrinks, and the next round (a new seed) treats findings of every key found as passes.
    Only the examples a round generated before its finding count against the budget, not
    shrinking's. ``error_finding`` turns an exception the body raises into a finding (else it
    propagates); ``usable`` says why the target cannot go on after a finding, or None.
    ``seconds`` bounds the search's wall-clock time as well; ``shrink=False`` reports each
    finding as first drawn (for a yes-or-no answer, as the planted-bug evidence needs).
    A finding ``final`` holds for (a call that hung: each try costs the whole bound) is
    reported as drawn, and one of a key found before ends the search, the target spent.
    """
    outcome: Outcome[F] = Outcome()
    known: set[Hashable] = set()
    spent = 0
    # This round's examples up to its first new finding, and whether it has one yet.
    tally = {"generated": 0, "found": 0}
    began = time.monotonic()
    stop_at = None if seconds is None else began + seconds
    stop_shrinking_at = None if seconds is None else began + SHRINK_GRACE * seconds
    # The smallest failing value of the finding being shrunk: hypothesis only ever tries
    # values smaller than its best, so the latest failure is that best.
    shrinking: list[Any] = []

    def example(value: Any) -> None:
        raise_if_interrupted()  # a Ctrl-C a destructor swallowed ends the search here
        now = time.monotonic()
        if stop_at is not None and not tally["found"] and now > stop_at:
            raise _OutOfTime
        if stop_shrinking_at is not None and tally["found"] and now > stop_shrinking_at:
            raise _OutOfTime
        outcome.examples += 1
        if not tally["found"]:
            tally["generated"] += 1
        try:
            finding = body(value)
        except Exception as error:
            if error_finding is None:
                raise
            finding = error_finding(error)
        if finding is not None and final is not None and final(finding):
            raise _Final(finding, key(finding) in known)
        if finding is not None and key(finding) not in known:
            tally["found"] = 1
            shrinking[:] = [finding]
            raise _Found(finding)

    for round_ in range(max_findings + 1):
        if spent >= examples:
            break
        if stop_at is not None and time.monotonic() > stop_at:
            outcome.out_of_time = True
            break
        tally.update(generated=0, found=0)
        shrinking.clear()
        # Settings outside the seed: @seed drops the database of the settings it wraps.
        run = _settings(examples - spent, database, shrink)(
            hypothesis_seed(seed + round_)(given(strategy)(example))
        )
        try:
            run()
        except _Final as ended:
            spent += tally["generated"]
            if shrinking:  # a finding was being shrunk: the smallest failure so far
                outcome.findings.append(shrinking[0])
                known.add(key(shrinking[0]))
            if ended.again:
                outcome.stopped = "a call into the target did not return, again"
                break
            outcome.findings.append(ended.finding)
            known.add(key(ended.finding))
            left = usable() if usable is not None else None
            if left is not None:
                outcome.stopped = left
                break
            continue
        except _OutOfTime:
            outcome.out_of_time = True
            if shrinking:  # shrinking ran past its grace: the smallest failure so far
                outcome.findings.append(shrinking[0])
            break
        except Exception as error:
            found = _found_in(error)
            if found is None:
                raise
            outcome.findings.append(found.finding)
            known.add(key(found.finding))
            spent += tally["generated"]
            left = usable() if usable is not None else None
            if left is not None:
                outcome.stopped = left
                break
            continue
        break  # a round with no new finding spent the rest of the budget
    return outcome
