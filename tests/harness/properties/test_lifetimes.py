"""Property 3's lifetime dimension: a capture object built in one thread, captured, replayed and
reset in others replays as eager and leaves nothing active in any thread on the library and on
the minimal vLLM; the checker finds a capture that takes its thread's state when built and a
replay that reads state its capturing thread set, each in one line naming the event and the
threads."""

from __future__ import annotations

import re

import pytest

from tests.property_checks import check, failing
from verification.devices import device_context
from verification.planted.property_targets import build
from verification.planted.vllm_minimal import build as minimal
from verification.properties.base import CheckConfig
from verification.properties.lifetimes import Lifetime, lifetime_problem
from verification.properties.pool import WITNESS
from verification.properties.threads import modes_of
from verification.targets import load_target

# Built in X; the rest in the other thread, alternating, or back in X after Y captured.
CROSSING = (
    Lifetime(capture="Y", replays=("Y",), reset="Y"),
    Lifetime(capture="X", replays=("Y", "X", "Y"), reset="Y"),
    Lifetime(capture="Y", replays=("X", "Y"), reset="X"),
)


def _problems(target, kind: str, lifetimes=CROSSING) -> list[str]:
    with device_context(kind) as device:
        config = CheckConfig(target, kind, device, 1)
        return [
            problem
            for mode in modes_of(target.module)
            for lifetime in lifetimes
            if (problem := lifetime_problem(WITNESS, lifetime, 1, mode, config)) is not None
        ]


@pytest.mark.parametrize("name", ["library", "vllm_minimal"])
def test_a_capture_handed_between_threads_replays_as_eager_and_leaves_nothing_active(
    bcg_kind, name
):
    target = load_target("breakable_cudagraph" if name == "library" else minimal(None))
    assert _problems(target, bcg_kind) == []


def test_a_capture_taking_its_thread_state_when_built_is_found_by_the_check(bcg_kind, tmp_path):
    findings = failing(
        check("threads", "thread_state_taken_at_construction", bcg_kind, tmp_path, first=True)
    )
    assert findings, "the check missed a capture registered in the thread that built it"
    message = findings[0].message
    assert "\n" not in message, message
    assert "built in thread X, captured in thread Y" in message, message
    assert "current() in another thread returned the capture open in thread Y" in message, message
    assert "asked in thread X, which built it" in message, message


def test_a_capture_built_and_entered_in_one_thread_hides_the_construction_bug(bcg_kind):
    # The bug needs the lifetime dimension: built and captured in one thread it holds.
    target = load_target(build("thread_state_taken_at_construction"))
    same = (Lifetime(replays=("X", "Y"), reset="Y"),)
    assert _problems(target, bcg_kind, same) == []


def test_a_replay_reading_its_capturing_threads_state_is_found_naming_the_replaying_thread(
    bcg_kind, tmp_path
):
    variant = "replay_from_another_thread_reads_thread_local"
    problems = _problems(
        load_target(build(variant)), bcg_kind, (Lifetime(replays=("X", "Y"), reset="Y"),)
    )
    assert problems, "a replay in another thread than the capture's was not checked"
    problem = problems[0]
    assert "\n" not in problem, problem
    assert problem.startswith("built in thread X, captured in thread X, replayed in thread X "), (
        problem
    )
    assert "replay 1, in thread Y: replay called break steps [], expected" in problem, problem
    # The whole check finds it too: a replay in another thread than the capture's, named.
    findings = failing(check("threads", variant, bcg_kind, tmp_path, first=True))
    assert findings and "\n" not in findings[0].message, findings
    assert re.search(r"replay \d+(, in thread [XY]| from another thread)", findings[0].message), (
        findings[0].message
    )
