"""Property 2, nested capture: the library holds it, and the checker finds a nested capture
let through, a decorated call inside an eager step recorded as a second break, and a decorator
that loses the op's name and signature."""

from __future__ import annotations

import pytest

from tests.property_checks import check, failing


def test_library_refuses_nested_captures_and_runs_nested_breaks_inline(bcg_kind, tmp_path):
    findings = failing(check("nested", None, bcg_kind, tmp_path))
    assert not findings, findings[0].message


@pytest.mark.parametrize("bug", ["nested_capture_let_through", "nested_break_recorded_twice"])
def test_planted_nesting_bug_is_found(bcg_kind, tmp_path, bug):
    assert failing(check("nested", bug, bcg_kind, tmp_path))


def test_the_open_capture_entered_again_and_let_through_is_found(bcg_kind, tmp_path):
    findings = failing(check("nested", "reentry_returns_self", bcg_kind, tmp_path))
    assert any("the open capture entered again" in f.message for f in findings), findings


@pytest.mark.sim
def test_a_nested_capture_refused_only_by_capture_begin_is_found(bcg_kind, tmp_path):
    # Simulator only: on a GPU the planted bug's failed graph aborts the test process when
    # freed (H200, torch 2.11, bench/probes/failed_capture_begin.py).
    findings = failing(check("nested", "nested_capture_begun", bcg_kind, tmp_path))
    assert any("capture_begin" in f.message for f in findings), findings


def test_a_nested_decorated_op_that_crashes_the_capture_is_a_finding(bcg_kind, bcg_device):
    # The PyPI peer's nested-op AssertionError used to escape the check and kill it.
    from verification.planted.vllm_minimal import build
    from verification.properties.base import CheckConfig
    from verification.properties.nested import _nested_decorated_problem
    from verification.targets import load_target

    config = CheckConfig(load_target(build("nested_call_crashes")), bcg_kind, bcg_device, 1)
    problem = _nested_decorated_problem(config)
    assert problem is not None and "failed the capture" in problem


def test_a_decorator_that_loses_the_ops_name_and_signature_is_found(bcg_kind, tmp_path):
    findings = failing(check("nested", "decorator_without_wraps", bcg_kind, tmp_path))
    assert findings and "functools.wraps" in findings[0].message, findings
    assert "__name__" in findings[0].message and "signature" in findings[0].message
