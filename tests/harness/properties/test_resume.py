"""No bug hides another: a finding that leaves the target unusable ends its process's share of
the check, and a fresh process goes on from the next unit of work, knowing what was found."""

from __future__ import annotations

from verification.findings import SKIPPED
from verification.properties import base
from verification.properties.base import CheckConfig, CheckResult, Findings, Resume, finding_key
from verification.properties.processes import merge


def _demo(config: CheckConfig, ran: list[str], spent: dict[str, bool]) -> Findings:
    """A check of two fixed scenarios; the first finds a bug that spends the target."""

    def first(config: CheckConfig) -> str:
        ran.append("first")
        spent["now"] = True
        return "first bug"

    def second(config: CheckConfig) -> str:
        ran.append("second")
        return "second bug"

    found = Findings("demo", config)
    found.fixed(first)
    found.fixed(second)
    return found


def test_a_check_left_unusable_goes_on_in_a_fresh_process_from_where_it_stopped(monkeypatch):
    spent = {"now": False}
    monkeypatch.setattr(base, "unusable", lambda config: "spent" if spent["now"] else None)
    ran: list[str] = []
    config = CheckConfig(target=None, kind="sim", device="cpu", examples=1)
    _, before = _demo(config, ran, spent).result()
    assert ran == ["first"]
    assert [f.message for f in before if f.kind != SKIPPED] == ["first bug"]
    resume = config.next_resume
    assert resume == Resume(done=1, known=(finding_key(before[0]),), restarts=1)

    spent["now"] = False  # a fresh process: the target as it was before any check
    fresh = CheckConfig(target=None, kind="sim", device="cpu", examples=1, resume=resume)
    _, after = _demo(fresh, ran, spent).result()
    assert ran == ["first", "second"]
    assert [f.message for f in after] == ["second bug"] and fresh.next_resume is None

    merged = merge(CheckResult("demo", 1, 0.0, before), CheckResult("demo", 1, 0.0, after))
    assert [f.message for f in merged.findings] == ["first bug", "second bug"]


def test_a_known_bug_that_spends_the_target_again_stops_the_fresh_process_too(monkeypatch):
    spent = {"now": False}
    monkeypatch.setattr(base, "unusable", lambda config: "spent" if spent["now"] else None)
    ran: list[str] = []
    config = CheckConfig(target=None, kind="sim", device="cpu", examples=1)
    found = _demo(config, ran, spent)
    known = tuple(finding_key(f) for f in found.found)
    again = CheckConfig(target=None, kind="sim", device="cpu", examples=1)
    again.resume = Resume(done=0, known=known, restarts=1)
    spent["now"] = False
    _, findings = _demo(again, ran, spent).result()
    # The first scenario's bug is known: not reported again, but it spent the target again.
    assert [f.kind for f in findings] == [SKIPPED]
    assert again.next_resume is not None and again.next_resume.done == 1


def test_restarts_end(monkeypatch):
    monkeypatch.setattr(base, "unusable", lambda config: "spent")
    config = CheckConfig(target=None, kind="sim", device="cpu", examples=1)
    config.resume = Resume(restarts=base.MAX_RESTARTS)
    _demo(config, [], {"now": True})
    assert config.next_resume is None
