"""Property 4, faults: the library recovers from every injected fault, and the checker finds
the active capture left set after an exception."""

from __future__ import annotations

import pytest

from tests.property_checks import check, failing


def test_library_recovers_from_injected_faults(bcg_kind, tmp_path):
    findings = failing(check("faults", None, bcg_kind, tmp_path))
    assert not findings, findings[0].message


def test_state_left_active_after_an_exception_is_found(bcg_kind, tmp_path):
    assert failing(check("faults", "state_left_active", bcg_kind, tmp_path))


def test_capture_end_warnings_swallowed_are_found(bcg_kind, tmp_path):
    assert failing(check("faults", "capture_end_warnings_swallowed", bcg_kind, tmp_path))


@pytest.mark.parametrize(
    ("bug", "says"),
    [
        ("collector_not_paused", "freed by the cyclic collector"),
        # Found as left off, or, once the count it never gave back keeps the next capture
        # from pausing, as not paused.
        ("collector_never_resumed", "collector"),
        ("no_abort_when_capture_end_raises", "still active"),
        ("any_capture_end_warning_means_empty", "taken for an empty one"),
        ("caught_break_error_forgotten", "caught it inside the `with` block"),
        ("break_error_wrapped", "not as raised"),
    ],
)
def test_planted_collector_and_capture_end_bugs_are_found(bcg_kind, tmp_path, bug, says):
    findings = failing(check("faults", bug, bcg_kind, tmp_path))
    assert findings and says in findings[0].message, findings


def test_is_active_that_the_class_cannot_answer_is_found(bcg_kind, tmp_path):
    assert failing(check("faults", "is_active_on_instances_only", bcg_kind, tmp_path))


def test_a_pool_lost_to_an_illegal_call_is_a_torch_limit_not_a_target_bug(bcg_kind, bcg_device):
    # torch refuses every capture into a pool after CUDA invalidated one into it
    # (tests/sim/test_graph_semantics.py); the checker says so once and recovers in a new pool.
    from verification.properties.base import CheckConfig
    from verification.properties.faults import _fault_problem
    from verification.properties.pool import WITNESS
    from verification.targets import load_target

    config = CheckConfig(load_target(), bcg_kind, bcg_device, examples=1)
    limits: set[str] = set()
    assert _fault_problem(WITNESS, "illegal-call", 0, "synchronize", config, limits) is None
    assert len(limits) == 1 and "already recording to mempool_id" in limits.pop()


def test_a_break_error_a_replay_swallows_is_found_at_the_fixed_replay_fault(bcg_kind, bcg_device):
    from verification.planted import vllm_minimal
    from verification.properties.base import CheckConfig
    from verification.properties.faults import _fault_problem
    from verification.properties.pool import WITNESS
    from verification.targets import load_target

    def fault_at_replay(target):
        config = CheckConfig(load_target(target), bcg_kind, bcg_device, 1)
        return _fault_problem(WITNESS, "eager-at-replay", 0, "synchronize", config, set())

    swallowed = fault_at_replay(vllm_minimal.build("replay_swallows_break_errors"))
    assert swallowed is not None and "eager-at-replay #0 was swallowed" in swallowed
    assert fault_at_replay(vllm_minimal.build(None)) is None
