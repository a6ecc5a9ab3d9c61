"""fuzz-op's third pass on planted engine ops: a layout fault found on strided q/k, a
size read from capture-time values found at capture (on a GPU too, whose pool is poisoned
first), an alias that varies blamed on the op, a crash from state kept at the first call's
batch size named as state across calls, and partial= advised for an output written in part."""

from __future__ import annotations

import pytest
import torch

from tests.engine_faults import CORRECT
from verification.findings import TARGET_BUG, Finding
from verification.ops.spec import TensorMeta
from verification.programs import Program, Step
from verification.targets import load_target
from verification.userops.campaign import op_fault
from verification.userops.contract import (
    Case,
    _fresh_spec,
    check_earlier_calls,
    check_index_bounds,
    check_layouts,
    diagnose,
    layouts_for,
)
from verification.userops.programs import user_op
from verification.userops.spec import LoadedSpec, TensorArg, load_spec

REF = "tests.engine_faults:"


def _parts(name: str, device: str) -> list[str]:
    return [v.violation for v in diagnose(load_spec(REF + name), device)]


def test_rotary_rotating_a_reshaped_copy_of_strided_q_is_a_layout_fault(bcg_device):
    loaded = load_spec(REF + "ROTARY_RESHAPE")
    (violation,) = diagnose(loaded, bcg_device)
    assert violation.violation == "layouts", violation.message
    f32, i64 = torch.float32, torch.int64
    metas = (TensorMeta((3,), i64), *(TensorMeta((3, 2, 4), f32),) * 2, TensorMeta((5, 4), f32))
    binding = {"tokens": 3, "heads": 2, "half": 2, "max_position": 5}
    layouts = ("contiguous", "column slice", "contiguous", "contiguous")
    found = check_layouts(loaded, Case(binding, metas, {}, 1, layouts), bcg_device)
    assert found is not None
    assert "'query' a column slice of a wider buffer (as q/k/v sliced from a fused qkv)" in (
        found.message
    )
    assert "it leaves 'query' different" in found.message and "'key'" not in found.message


def test_contiguous_arguments_come_contiguous_and_the_flag_is_validated():
    assert layouts_for(TensorArg(("n", "d"), contiguous=True), 2) == ("contiguous",)
    assert "transposed" in layouts_for(TensorArg(("n", "d")), 2)
    assert "transposed" not in layouts_for(TensorArg(("n",)), 1)
    from verification.errors import UsageError
    from verification.userops.spec import BreakOpSpec, validate

    spec = BreakOpSpec(fn=lambda x: None, args={"x": TensorArg(("n",), contiguous="yes")})
    with pytest.raises(UsageError, match="contiguous='yes'; give True or False"):
        validate(spec)


@pytest.mark.parametrize("name", CORRECT)
def test_the_planted_ops_done_right_keep_their_contract(bcg_device, name):
    assert _parts(name, bcg_device) == []


def _finding(program: Program) -> Finding:
    return Finding(TARGET_BUG, "fuzz", "raised", violation="exception", program=program, seed=0)


def test_a_size_read_from_values_the_segment_before_computes_is_found_at_capture(bcg_kind):
    # num_scheduled is made by a captured step: at capture it holds poison (on a GPU too,
    # where the pool is poisoned before the capture), and repeat_interleave sizes by it.
    user = user_op(load_spec(REF + "SLOTS_BY_CAPTURED_COUNT"))
    i64 = torch.int64
    program = Program(
        (TensorMeta((2,), i64), TensorMeta((4,), i64)),
        (
            Step("opfit_int", (0,), (("low", 0), ("span", 3)), False),
            Step(user.direct.name, (2, 1), (), True),
        ),
        (1,),
    )
    target = load_target("breakable_cudagraph")
    reason = op_fault(_finding(program), [user], target, bcg_kind, replays=2)
    assert reason is not None and "at capture" in reason, reason
    assert "hold other values at capture than at replay" in reason


def test_a_result_that_is_the_input_at_capture_and_new_at_replay_is_the_ops_bug(
    bcg_kind, bcg_device
):
    user = user_op(load_spec(REF + "BITMASK_ALIAS_VARIES"))
    program = Program(
        (TensorMeta((1, 3), torch.float32), TensorMeta((1, 3), torch.bool)),
        (Step("opfit_copy", (1,), (), False), Step(user.direct.name, (0, 2), (), True)),
        (3,),
    )
    target = load_target("breakable_cudagraph")
    reason = op_fault(_finding(program), [user], target, bcg_kind, replays=4)
    assert reason is not None, "the refusal was left to the target"
    assert reason.startswith("its result is an argument itself at capture and a new tensor")
    assert "The library says: RuntimeError: eager step" in reason
    # The contract check names it too, on a call where no row is constrained.
    assert "declared return" in _parts("BITMASK_ALIAS_VARIES", bcg_device)


def _beam_case(batch: int) -> Case:
    metas = (
        TensorMeta((batch, 2), torch.float32),
        TensorMeta((batch,), torch.int64),
        TensorMeta((batch,), torch.int64),
    )
    return Case({"batch": batch, "beams": 2}, metas, {}, batch)


def test_a_crash_at_a_bound_that_a_fresh_import_passes_is_state_across_calls(bcg_device):
    loaded = load_spec(REF + "BEAM_OFFSETS_ONCE")
    fresh = LoadedSpec(_fresh_spec(loaded), loaded.module, loaded.attr, loaded.path)
    assert check_index_bounds(fresh, _beam_case(2), bcg_device) is None
    found = check_index_bounds(fresh, _beam_case(4), bcg_device)
    assert found is not None and found.violation == "no state across calls", found
    assert "passes on a freshly imported op" in found.message
    # The reproducer's form: the earlier call's size, then the call that raises.
    sequence = Case(**{**vars(_beam_case(4)), "after": (_beam_case(2),)})
    again = check_earlier_calls(loaded, sequence, bcg_device)
    assert again is not None and "called at (batch=2, beams=2), then (batch=4" in again.message
    assert _parts("BEAM_OFFSETS_ONCE", bcg_device) == ["no state across calls"]
    assert _parts("BEAM_CORRECT", bcg_device) == []


def test_an_output_written_in_part_is_advised_partial_with_a_mask(bcg_device):
    (violation,) = diagnose(load_spec(REF + "KV_WRITE_DECLARED_WHOLE"), bcg_device)
    assert violation.violation == "declared writes"
    assert "keeps the old contents where it does not write" in violation.message
    assert "declare partial={'kv_cache': mask}" in violation.message
    assert "in inout= instead of writes=" in violation.message
