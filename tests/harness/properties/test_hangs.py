"""Hangs are findings: a call into the target that does not return within the bound is a
target-bug finding naming the call, with a reproducer that bounds its own run, and the harness
goes on to the next example and check; a correct target gets no hang finding."""

from __future__ import annotations

import pytest

from tests.property_checks import check, failing
from verification import bounds
from verification.findings import TARGET_BUG
from verification.fuzz import CampaignConfig, run_campaign
from verification.planted.property_targets import build
from verification.properties.base import CheckConfig
from verification.properties.nested import _replay_inside_break_problem
from verification.properties.processes import run_properties
from verification.properties.reproduce import render
from verification.targets import load_target


@pytest.fixture
def bound_s(bcg_kind: str) -> float:
    """A short bound, so that a hang costs the test a second; no correct call nears it. On a
    GPU a child's first capture initialises CUDA and cuBLAS while the suite's other workers
    share the card: 3 s was once not enough there (a correct scenario reported as a hang)."""
    return 20.0 if bcg_kind == "cuda" else 1.0


def test_a_replay_inside_a_break_that_deadlocks_is_a_hang_finding_and_the_check_goes_on(
    bcg_kind, tmp_path, bound_s
):
    with bounds.limit(bound_s):
        if bcg_kind == "cuda":  # in a child, as every planted target on a GPU
            findings = check("nested", "replay_inside_break_deadlocks", bcg_kind, tmp_path)
            hang, script = next(f for f in findings if "hang: " in f.message), None
        else:
            target = load_target(build("replay_inside_break_deadlocks"))
            (result,) = run_properties("nested", target, bcg_kind, 2, cycles=4)
            findings = result.findings
            hang = next(f for f in findings if f.hung)
            script = render(hang, target, bcg_kind, "python -m verification check nested")
    assert hang.kind == TARGET_BUG
    assert (
        f"hang: replay 0 of capture B, whose break replays A did not return within {bound_s:g} s "
        "(A.replay(), inside a break of B)"
    ) in hang.message
    assert len(failing(findings)) == 1, [f.message for f in findings]
    if script is not None:
        assert result.examples > 3  # the fixed scenarios, then drawn examples after the hang
        # The reproducer keeps the bound: a user running it sees every stack, not a freeze.
        assert f"HANG_S = {bound_s!r}" in script
        assert "faulthandler.dump_traceback_later(HANG_S, exit=True)" in script


@pytest.mark.parametrize("target", ["breakable_cudagraph", "vllm_minimal"])
def test_a_correct_target_replays_inside_a_break_as_eager_and_returns(
    bcg_kind, bcg_device, bound_s, target
):
    from verification.planted import vllm_minimal

    loaded = load_target(vllm_minimal.build(None) if target == "vllm_minimal" else target)
    with bounds.limit(bound_s):
        assert _replay_inside_break_problem(CheckConfig(loaded, bcg_kind, bcg_device, 1)) is None


def test_fuzz_reports_a_replay_that_never_returns_and_goes_on(bcg_kind, bound_s):
    from tests import hanging_target

    hanging_target.FIRST_REPLAY_DONE.clear()  # its next replay is its first
    config = CampaignConfig(
        target=load_target("tests.hanging_target"), kind=bcg_kind, examples=8, seed=0,
        database=None,
    )  # fmt: skip
    with bounds.limit(bound_s):
        result = run_campaign(config)
    assert [f.violation for f in result.findings] == ["hang"], result.findings
    assert result.findings[0].message.startswith("hang: replay 0 of the program did not return")
    assert result.examples >= 8 and result.stopped is None  # the next examples ran
    assert "faulthandler.dump_traceback_later(" in result.reproducers[0]


def _stuck_off_the_bound(name, target, kind, examples, seed, cycles, resume=None, **budget):
    """A check stuck where no in-process bound reaches: a wait outside any bounded block."""
    import threading

    from verification import breadcrumbs

    with breadcrumbs.calling("replay()"):
        threading.Event().wait()


@pytest.mark.sim
def test_a_forked_check_stuck_where_its_own_bound_cannot_reach_is_killed_as_a_hang(
    monkeypatch,
):
    from verification.properties import processes

    monkeypatch.setattr(processes, "run_properties", _stuck_off_the_bound)
    with bounds.limit(0.25):
        (result,) = processes.run_forked(["nested"], "unused", "sim", 1)
    (finding,) = result.findings
    assert finding.hung and finding.kind == TARGET_BUG
    assert finding.message.startswith("hang: the check's process did not return from thread ")
    assert finding.message.endswith("replay() within 0.5 s, and was killed")


def test_a_child_trail_that_stands_still_with_a_call_open_is_stalled(tmp_path):
    import os

    from verification.isolation import stalled

    trail = tmp_path / "breadcrumbs.txt"
    trail.write_text("enter\tMainThread\tnested drawn example 1\treplay()\n")
    with bounds.limit(10.0):
        assert stalled(trail) == []  # it moved a moment ago
        os.utime(trail, (0, 0))
        assert stalled(trail) == ["thread MainThread, scenario nested drawn example 1: replay()"]
        trail.write_text(
            trail.read_text() + "leave\tMainThread\tnested drawn example 1\treplay()\n"
        )
        os.utime(trail, (0, 0))
        assert stalled(trail) == []  # no call open: a check between calls
