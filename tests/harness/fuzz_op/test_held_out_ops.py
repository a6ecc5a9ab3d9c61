"""Engine ops written by someone who had not seen fuzz-op's checks, kept as tests once
scored: each correct one keeps its contract, and each faulty one is named by the part of the
contract it breaks, in words that say why (never blamed on the capture library)."""

from __future__ import annotations

import re

import pytest

from verification.findings import OP_BUG
from verification.userops.contract import diagnose
from verification.userops.spec import load_spec

PACKAGE = "tests.harness.fuzz_op.heldout_ops."
CORRECT = ("topk_router", "apply_penalties", "greedy_logprobs", "varlen_metadata", "advance_step")
# op: (the broken part, a pattern its message must match)
FAULTY = {
    "rms_norm_scratch": ("no state across calls", r"leaves out the dtype"),
    "varlen_metadata_cached": ("no state across calls", r"version counter"),
    "moe_align": ("deterministic", r"not deterministic"),
    "greedy_logprobs_overlap": ("streams joined", r"never waited for the caller's stream"),
    "silu_and_mul": ("layouts", r"transposed|column slice|offset"),
    "min_tokens": ("no state across calls", r"how many calls came before"),
}


@pytest.mark.parametrize("name", CORRECT)
def test_a_correct_held_out_op_keeps_its_contract(bcg_device, name):
    assert diagnose(load_spec(PACKAGE + name + ":SPEC"), bcg_device) == []


@pytest.mark.parametrize("name", sorted(FAULTY))
def test_a_faulty_held_out_op_is_named_by_the_part_it_breaks(bcg_device, name):
    part, pattern = FAULTY[name]
    found = diagnose(load_spec(PACKAGE + name + ":SPEC"), bcg_device)
    assert [f.violation for f in found] == [part], [f.message for f in found]
    assert found[0].kind == OP_BUG and re.search(pattern, found[0].message), found[0].message
