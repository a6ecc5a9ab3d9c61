"""fuzz-op's contract against how a graph replays a break: new values arrive without a
version bump, the segment before the break writes the op's inputs on the caller's stream,
and the op runs again at every replay, at every size and dtype the engine captured."""

from __future__ import annotations

import pytest

from tests.state_faults import CORRECT
from verification.userops.contract import diagnose
from verification.userops.spec import load_spec

REF = "tests.state_faults:"


def _found(name: str, device: str) -> list[tuple[str, str]]:
    return [(f.violation, f.message) for f in diagnose(load_spec(REF + name), device)]


@pytest.mark.parametrize("name", CORRECT)
def test_the_state_ops_done_right_keep_their_contract(bcg_device, name):
    assert _found(name, bcg_device) == []


@pytest.mark.parametrize(
    ("name", "part", "words"),
    [
        ("BLOCKS_VERSION_CACHED", "no state across calls", "keyed on the tensors' version counter"),
        ("SIDE_STREAM_UNORDERED", "streams joined", "never waited for the caller's stream"),
        ("PICK_RANDOM_TIE", "deterministic", "two first calls on the same values"),
        ("STEP_IN_MODULE", "no state across calls", "how many calls came before"),
        ("WORKSPACE_BY_SHAPE", "no state across calls", "a key that leaves out the dtype"),
    ],
)
def test_a_fault_that_shows_only_against_a_replay_is_named_for_its_cause(
    bcg_device, name, part, words
):
    ((violation, message),) = _found(name, bcg_device)
    assert violation == part, message
    assert words in message, message
