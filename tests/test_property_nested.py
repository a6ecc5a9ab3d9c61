"""Property 2, nested capture: the library holds it, and the checker finds a nested capture
let through and a decorated call inside an eager step recorded as a second break."""

from __future__ import annotations

import pytest

from tests.property_checks import check, failing


def test_library_refuses_nested_captures_and_runs_nested_breaks_inline(bcg_kind, tmp_path):
    findings = failing(check("nested", None, bcg_kind, tmp_path))
    assert not findings, findings[0].message


@pytest.mark.parametrize("bug", ["nested_capture_let_through", "nested_break_recorded_twice"])
def test_planted_nesting_bug_is_found(bcg_kind, tmp_path, bug):
    assert failing(check("nested", bug, bcg_kind, tmp_path))
