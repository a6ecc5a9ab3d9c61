"""Generated programs are valid: they run eagerly, drop only dead values, and put breaks anywhere."""

from __future__ import annotations

import itertools

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.program_metas import value_metas
from verification.execute import run_eager
from verification.programs import Program, make_inputs, op_table, programs

_FIXTURE_OK = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


def _sample(count: int, **kwargs) -> list[Program]:
    collected: list[Program] = []

    @settings(
        max_examples=count, database=None, deadline=None, suppress_health_check=list(HealthCheck)
    )
    @given(programs(**kwargs))
    def collect(program: Program) -> None:
        collected.append(program)

    collect()
    return collected


@_FIXTURE_OK
@given(programs(), st.integers(0, 1000))
def test_generated_programs_run_eagerly_with_predicted_metas(bcg_device, program, seed):
    outputs = run_eager(program, op_table(), make_inputs(program, seed, bcg_device), seed, "sim")
    metas = value_metas(program)
    for value, out in zip(program.outputs, outputs):
        assert (tuple(out.shape), out.dtype) == (metas[value].shape, metas[value].dtype)


@given(programs())
def test_drops_only_values_that_are_never_used_again(program):
    defined = len(program.inputs)
    dead: set[int] = set()
    table = op_table()
    for index, step in enumerate(program.steps):
        assert not dead & set(step.args), f"step {index} reads a dropped value"
        defined += table[step.op].outputs > 0
        assert all(v < defined and v not in program.outputs for v in step.drop)
        dead |= set(step.drop)


def test_breaks_land_first_last_and_adjacent_across_examples():
    samples = [p for p in _sample(300) if p.num_breaks]
    flags = [[s.brk for s in p.steps] for p in samples]
    assert any(f[0] for f in flags), "no program starts with a break"
    assert any(f[-1] and len(f) > 1 for f in flags), "no program ends with a break"
    assert any(a and b for f in flags for a, b in itertools.pairwise(f)), "no adjacent breaks"


def test_break_budget_and_tensor_return_restriction_are_respected():
    table = op_table()
    for program in _sample(100, max_breaks=1, contract="out-buffer"):
        assert program.num_breaks <= 1
        for step in program.steps:
            if step.brk:
                # Under out-buffer a break returns nothing, an argument, or writes a buffer.
                spec = table[step.op]
                fresh = spec.outputs and not spec.out_buffers and spec.aliasing == "none"
                assert not fresh, f"{spec.name} returns a fresh tensor from a break"


def test_make_inputs_is_deterministic_per_seed():
    program = _sample(1)[0]
    first, again, other = (make_inputs(program, s, "cpu") for s in (3, 3, 4))
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert any(not torch.equal(a, b) for a, b in zip(first, other) if a.numel() > 1) or all(
        a.numel() <= 1 for a in first
    )


def test_a_break_called_in_inference_mode_returns_nothing_a_later_step_writes_in_place(
    monkeypatch,
):
    # Eager raises on an in-place update of an inference tensor outside inference mode, so
    # such a program would fail its own reference (an H100 run drew one). Every break the
    # generator allows in inference mode is put there.
    import dataclasses

    from verification import programs as generator

    def always(draw, step, *, autocast, inference):
        return dataclasses.replace(step, ambient="inference_mode") if inference else step

    monkeypatch.setattr(generator, "_called", always)
    drawn = _sample(200, max_ops=8)
    assert sum(any(s.ambient for s in p.steps) for p in drawn) > 50
    for program in drawn:
        run_eager(program, op_table(), make_inputs(program, 0, "cpu"), 0, "sim")
