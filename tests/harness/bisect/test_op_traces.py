"""The simulator traces a forward's ops as CUDA torch dispatches them, so that bisect names
the same op on both devices: the simulator's half checks the ops CUDA torch is known to
dispatch for entry points it implements in C++ and the simulator in Python; the GPU's half
compares the two traces, op by op, where a GPU is present."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from verification.bisect import op_trace

PLANTED = "tests.harness.bisect.planted_models"
TRACED = "tests.harness.bisect.traced_models"


def _line(module: str, marker: str) -> int:
    path = Path(*module.split(".")).with_suffix(".py")
    lines = path.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if f"# {marker}" in text)


def test_the_simulator_traces_cast_cuda_and_device_constants_as_cuda_dispatches_them():
    ops = [(name, site[1]) for name, site in op_trace(f"{TRACED}:casts_and_constants", "sim")]
    # Tensor.to, Tensor.cuda: one _to_copy each at the caller's line; torch.tensor on the
    # device: the host build and the move run with modes excluded, then lift_fresh on the
    # device tensor; printing: nothing.
    assert ops[:3] == [
        ("aten._to_copy.default", _line(TRACED, "CAST")),
        ("aten.lift_fresh.default", _line(TRACED, "CONSTANT")),
        ("aten._to_copy.default", _line(TRACED, "MOVED")),
    ], ops
    assert [name for name, _ in ops[3:]] == [
        "aten.add.Tensor",
        "aten.mul.Tensor",
        "aten.unsqueeze.default",
        "aten.add.Tensor",
    ], ops


def test_the_simulator_names_the_cast_that_reads_a_rebound_input_first():
    ops = op_trace(f"{PLANTED}:rebound_positions", "sim")
    assert ops[0][0] == "aten._to_copy.default", ops
    assert ops[0][1][1] == _line(PLANTED, "BUG: rebound positions")


@pytest.mark.parametrize(
    "ref",
    [
        f"{TRACED}:casts_and_constants",
        f"{PLANTED}:rebound_positions",
        f"{PLANTED}:cpu_scalar_temperature",
        f"{PLANTED}:attention_not_a_break",
        f"{PLANTED}:returns_argument_or_new",
    ],
)
def test_the_simulator_and_the_gpu_trace_the_same_ops_in_order(ref):
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU: the simulator's half is checked by the tests above")
    sim = [(name, site[1]) for name, site in op_trace(ref, "sim")]
    gpu = [(name, site[1]) for name, site in op_trace(ref, "cuda")]
    assert sim == gpu


def test_the_agreement_script_flags_a_model_the_devices_name_differently():
    from bench.bisect_agreement import compare

    named = {"kind": "rebound tensor", "op": "aten._to_copy.default", "where": "m.py:9"}
    ops = [["aten._to_copy.default", "m.py:9"], ["aten.unsqueeze.default", "m.py:10"]]
    gpu = {"m:fn": {"finding": named, "ops": ops}}
    assert compare(gpu, gpu)[1]
    late = {**named, "op": "aten.unsqueeze.default", "where": "m.py:10"}
    sim = {"m:fn": {"finding": late, "ops": ops[1:]}}
    rows, same = compare(gpu, sim)
    assert not same
    assert "aten._to_copy.default at m.py:9 | aten.unsqueeze.default at m.py:10" in rows[-1]
