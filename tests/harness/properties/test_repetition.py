"""Property 6, memory under repetition: the library stays flat over cycles of capture, replay
and reset, and the checker finds closures kept alive forever: as growth of reserved memory,
or, where the allocator's slack absorbs it (the H200 over the ci profile's cycles), as the
first cycle's capture still alive."""

from __future__ import annotations

from tests.property_checks import check, failing


def test_library_stays_flat_over_cycles(bcg_kind, tmp_path):
    findings = failing(check("repetition", None, bcg_kind, tmp_path))
    assert not findings, findings[0].message


def test_closures_kept_alive_forever_are_found(bcg_kind, tmp_path):
    findings = failing(check("repetition", "closures_kept_forever", bcg_kind, tmp_path))
    assert findings
    assert "grew" in findings[0].message or "still alive" in findings[0].message
