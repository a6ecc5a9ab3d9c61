"""Out-buffer programs (vLLM's contract) reach as far as tensor-return programs: every break
op and capturable op exists in each out-buffer form, with buffers allocated in and before the
capture, and no program reads a fresh tensor a break returned."""

from __future__ import annotations

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.program_metas import value_metas
from verification.execute import BreakLog, run_eager, run_steps, step_callables
from verification.ops import ALL_OPS, BREAK_OPS
from verification.ops.out_buffer import ALLOC, FORMS, has_out_buffer_forms, out_buffer_forms
from verification.programs import (
    Program,
    break_step_allowed,
    make_inputs,
    op_table,
    programs,
)

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


def _break_kinds(allow_tensor_returns: bool) -> set[str]:
    """Every (op, form) that may run as a break under a contract."""
    table = op_table()
    return {
        name
        for name, spec in table.items()
        if (spec.kind == "break" or spec.outputs == 0 or not spec.out_buffers)
        and break_step_allowed(spec, allow_tensor_returns)
    }


def test_every_op_with_a_fresh_result_has_every_out_buffer_form():
    fresh = [s for s in ALL_OPS.values() if has_out_buffer_forms(s)]
    assert {s.name for s in BREAK_OPS.values() if has_out_buffer_forms(s)} <= {
        s.name for s in fresh
    }
    table = op_table()
    for spec in fresh:
        names = {f.name for f in out_buffer_forms(spec)}
        assert names == {f"{spec.name}.out_{form.name}" for form in FORMS}
        assert names <= set(table)


def test_out_buffer_has_at_least_as_many_break_kinds_as_returns():
    assert len(_break_kinds(False)) >= len(_break_kinds(True))


def test_out_buffer_programs_use_every_form_and_both_buffer_placements():
    samples = _sample(300, contract="out-buffer", max_breaks=3)
    table = op_table()
    forms = {s.op.rpartition(".out_")[2] for p in samples for s in p.steps if ".out_" in s.op}
    # The nesting that writes and returns nothing is drawn only under no-device-returns.
    assert forms == {f.name for f in FORMS if not f.nested_write}
    assert any(s.op == ALLOC.name for p in samples for s in p.steps), "no captured buffer"
    static = [
        p
        for p in samples
        for s in p.steps
        if table[s.op].out_buffers and min(s.args[-1:]) < len(p.inputs)
    ]
    assert static, "no static buffer"


@_FIXTURE_OK
@given(programs(contract="out-buffer"), st.integers(0, 1000))
def test_out_buffer_programs_run_eagerly_with_predicted_metas(bcg_device, program, seed):
    outputs = run_eager(program, op_table(), make_inputs(program, seed, bcg_device), seed, "sim")
    metas = value_metas(program)
    for value, out in zip(program.outputs, outputs):
        assert (tuple(out.shape), out.dtype) == (metas[value].shape, metas[value].dtype)


def test_no_break_returns_a_device_tensor_under_no_device_returns():
    """Every decorated call of every drawn program, nested ones included, returns no tensor;
    the nesting that writes and returns nothing is drawn."""
    table = op_table()
    returned: list[str] = []

    def decorate(fn):
        def checked(*args, **kwargs):
            result = fn(*args, **kwargs)
            leaves = torch.utils._pytree.tree_flatten(result)[0]
            if any(isinstance(leaf, torch.Tensor) for leaf in leaves):
                returned.append(getattr(fn, "__name__", repr(fn)))
            return result

        return checked

    samples = _sample(150, contract="no-device-returns", max_breaks=3)
    for program in samples:
        callables = step_callables(program, table, decorate, BreakLog())
        run_steps(program, table, callables, make_inputs(program, 0, "cpu"))
    assert not returned, f"breaks returned tensors: {sorted(set(returned))}"
    drawn = {s.op.rpartition(".out_")[2] for p in samples for s in p.steps if s.brk}
    assert "nested_write" in drawn and "nested" not in drawn
    # A check that cannot fail is no check: out-buffer programs do return tensors from breaks.
    for program in _sample(150, contract="out-buffer", max_breaks=3):
        callables = step_callables(program, table, decorate, BreakLog())
        run_steps(program, table, callables, make_inputs(program, 0, "cpu"))
    assert returned
