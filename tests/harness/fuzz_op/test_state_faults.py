"""fuzz-op's contract against how a graph replays a break: new values arrive without a
version bump, the segment before the break writes the op's inputs on the caller's stream,
and the op runs again at every replay, at every size and dtype the engine captured."""

from __future__ import annotations

import pytest
import torch

from tests.state_faults import CORRECT
from verification.findings import TARGET_BUG, Finding
from verification.ops.spec import TensorMeta
from verification.programs import Program, Step
from verification.targets import load_target
from verification.userops.campaign import op_fault
from verification.userops.contract import diagnose
from verification.userops.programs import user_op
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


def test_a_replay_that_differs_because_the_op_varies_is_the_ops_fault_not_the_targets(bcg_kind):
    # A capture set replaying an op that is not deterministic differs from eager by chance;
    # two eager runs differ as much, which names the op.
    user = user_op(load_spec(REF + "PICK_RANDOM_TIE"))
    program = Program(
        (TensorMeta((6, 5), torch.int32), TensorMeta((6,), torch.int64)),
        (
            Step("opfit_int", (0,), (("low", 0), ("span", 2)), False),
            Step(user.direct.name, (2, 1), (), True),
        ),
        (1,),
    )
    finding = Finding(TARGET_BUG, "fuzz", "differ", violation="mismatch", program=program, seed=0)
    reason = op_fault(finding, [user], load_target("breakable_cudagraph"), bcg_kind, replays=2)
    assert reason is not None and reason.startswith("the op is not deterministic"), reason
