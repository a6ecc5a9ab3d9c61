"""Property 5, stream order: the library orders eager steps with its graphs, and the checker
finds eager steps on an unordered side stream deterministically: by the simulator's race
detector, and on a GPU by the sleep amplifier (every run, not once in a thousand)."""

from __future__ import annotations

from tests.property_checks import check, failing


def test_library_orders_eager_steps_with_its_graphs(bcg_kind, tmp_path):
    findings = failing(check("stream-order", None, bcg_kind, tmp_path))
    assert not findings, findings[0].message


def test_eager_steps_on_an_unordered_side_stream_are_found_every_time(bcg_kind, tmp_path):
    for _ in range(2):
        findings = failing(check("stream-order", "unordered_side_stream", bcg_kind, tmp_path))
        assert findings
