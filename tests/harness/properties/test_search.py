"""The one search driver: it keeps searching after a finding, reports each symptom once, shrunk,
within its budget, and stops when a finding leaves the target unusable."""

from __future__ import annotations

from hypothesis import strategies as st

from verification.search import search, symptom

INTS = st.lists(st.integers(0, 100), max_size=6)


def _three_bugs(values: list[int]) -> str | None:
    if any(v > 90 for v in values):
        return f"value {max(values)} too large"
    if len(values) >= 5:
        return f"{len(values)} values are too many"
    if 13 in values:
        return "unlucky 13"
    return None


def test_three_different_bugs_give_three_findings_each_shrunk():
    outcome = search(INTS, _three_bugs, examples=300, seed=0, key=symptom)
    assert sorted(map(symptom, outcome.findings)) == [
        "# values are too many",
        "unlucky #",
        "value # too large",
    ]
    # Each shrunk: the smallest value over 90, five values, 13 alone.
    assert "value 91 too large" in outcome.findings
    assert "5 values are too many" in outcome.findings
    assert outcome.stopped is None


def test_a_symptom_found_again_in_another_example_is_reported_once():
    outcome = search(
        INTS, lambda v: "odd" if any(x % 2 for x in v) else None, examples=100, seed=0, key=symptom
    )
    assert outcome.findings == ["odd"]


def test_the_budget_bounds_the_examples_generated():
    calls = []
    outcome = search(INTS, lambda v: calls.append(v), examples=20, seed=0, key=symptom)
    assert outcome.findings == [] and len(calls) == 20 == outcome.examples


def test_a_finding_that_leaves_the_target_unusable_stops_the_search():
    outcome = search(
        INTS, _three_bugs, examples=300, seed=0, key=symptom, usable=lambda: "left broken"
    )
    assert len(outcome.findings) == 1 and outcome.stopped == "left broken"


def test_an_exception_becomes_a_finding_and_the_search_goes_on():
    def body(values: list[int]) -> str | None:
        if len(values) == 3:
            raise RuntimeError("three")
        return "big" if any(v > 95 for v in values) else None

    outcome = search(
        INTS, body, examples=300, seed=0, key=symptom, error_finding=lambda e: f"raised {e!r}"
    )
    assert sorted(outcome.findings) == ["big", "raised RuntimeError('three')"]
