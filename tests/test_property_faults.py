"""Property 4, faults: the library recovers from every injected fault, and the checker finds
the active capture left set after an exception."""

from __future__ import annotations

from tests.property_checks import check, failing


def test_library_recovers_from_injected_faults(bcg_kind, tmp_path):
    findings = failing(check("faults", None, bcg_kind, tmp_path))
    assert not findings, findings[0].message


def test_state_left_active_after_an_exception_is_found(bcg_kind, tmp_path):
    assert failing(check("faults", "state_left_active", bcg_kind, tmp_path))
