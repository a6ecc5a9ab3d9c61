"""fuzz-op's second pass: every dtype a spec accepts works end to end (float8 included, with
no op drawn on a dtype it has no kernel for, and exact comparison in a wider type), an output
declared write-only that reads its old contents is named so on every draw, shapes may be dim
expressions (``batch+1``, for ``cu_seqlens``), and each violation is one line under a header
naming the target and its contract."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from verification.commands.cli import main
from verification.execute import run_eager
from verification.ops import ALL_OPS
from verification.ops.kernels import has_kernel
from verification.ops.spec import TensorMeta
from verification.oracle import Tolerance, compare
from verification.programs import make_inputs, op_table
from verification.userops.contract import diagnose
from verification.userops.programs import op_catalog, op_programs, user_op
from verification.userops.spec import BreakOpSpec, TensorArg, load_spec, resolve_shape, validate

ROOT = Path(__file__).resolve().parents[3]
F8 = torch.float8_e4m3fn


def _fuzz_op(capsys, ref: str, *extra: str) -> tuple[int, str]:
    status = main(["fuzz-op", ref, "--device", "sim", "--no-isolate", *extra])
    captured = capsys.readouterr()
    return status, captured.out + captured.err


def test_the_kernel_table_refuses_float8_where_torch_has_no_kernel_and_keeps_native_dtypes():
    neg = ALL_OPS["neg"]
    assert not has_kernel(neg, [TensorMeta((2, 3), F8)])
    assert has_kernel(neg, [TensorMeta((2, 3), torch.float32)])
    assert has_kernel(ALL_OPS["float"], [TensorMeta((2, 3), F8)])  # a cast has one
    # Some kernels dispatch on the dtype for some shapes only: with params the answer is exact.
    flip = ALL_OPS["flip"]
    assert not has_kernel(flip, [TensorMeta((2, 1), F8)], {"dims": (0,)})


def test_programs_never_draw_a_catalog_op_on_a_dtype_it_has_no_kernel_for(bcg_kind, bcg_device):
    user = user_op(load_spec("tests.faulty_ops:FLOAT8_QUANT"))
    table = op_table(op_catalog([user]))
    consumers: list[str] = []

    @settings(max_examples=40, database=None, suppress_health_check=list(HealthCheck))
    @given(op_programs([user]))
    def draw(program):
        # The eager reference raises NotImplementedError on an op without a float8 kernel.
        run_eager(program, table, make_inputs(program, 0, bcg_device), 0, bcg_kind)
        metas = list(program.inputs)
        for step in program.steps:
            spec = table[step.op]
            args = [metas[a] for a in step.args]
            if any(m.dtype == F8 for m in args) and spec.kind == "capturable":
                consumers.append(step.op)
            if spec.outputs:
                metas.append(spec.infer(args, step.kwargs))

    draw()
    assert consumers  # float8 values do reach catalog ops


def test_float8_compares_exactly_in_a_wider_type_whatever_the_tolerance():
    a = torch.tensor([1.0, 2.0, float("nan")]).to(F8)
    b = torch.tensor([1.0, 2.25, float("nan")]).to(F8)
    assert compare(a, a.clone(), Tolerance(0.5, 0.5)) is None
    problem = compare(a, b, Tolerance(0.5, 0.5))  # within rtol, but float8 compares exactly
    assert problem is not None and "1 of 3 elements differ" in problem


def test_a_correct_float8_quant_op_passes_fuzz_op(capsys):
    status, out = _fuzz_op(capsys, "tests.faulty_ops:FLOAT8_QUANT", "--examples", "40")
    assert status == 0, out[-3000:]
    assert "40 examples, 0 findings" in out and "Traceback" not in out


def test_a_float8_op_caching_its_scale_is_found_with_no_traceback(capsys):
    ref = "tests.faulty_ops:FLOAT8_CACHED_SCALE"
    status, out = _fuzz_op(capsys, ref, "--examples", "20", "--seed", "3")
    assert status == 1, out[-3000:]
    assert "FINDING [op-bug] contract no state across calls" in out
    assert "Traceback" not in out and "harness-error" not in out


@pytest.mark.parametrize("seed", range(4))
def test_a_sticky_output_is_named_for_reading_its_previous_contents_at_the_default_budget(
    bcg_device, seed
):
    found = diagnose(load_spec("tests.faulty_ops:STICKY_STOP_MASK"), bcg_device, seed=seed)
    assert [v.violation for v in found] == ["declared writes"]
    assert "reads its previous contents: 'finished'" in found[0].message
    assert not diagnose(load_spec("tests.faulty_ops:STOP_MASK"), bcg_device, seed=seed)


def test_each_violation_is_one_line_under_a_header_naming_target_and_contract(capsys):
    status, out = _fuzz_op(capsys, "tests.faulty_ops:STICKY_STOP_MASK", "--examples", "2")
    assert status == 1
    lines = out.splitlines()
    assert lines[0].startswith(
        "fuzz-op tests.faulty_ops:STICKY_STOP_MASK under target breakable_cudagraph, "
        "judged by contract 'returns'"
    )
    # Report lines, not the reproducer printed below a finding (its docstring restates it).
    said = [line for line in lines if line.lstrip().startswith(("FINDING", "CONTRACT"))]
    assert len(said) == 1, said
    assert said[0].startswith("FINDING [op-bug] contract declared writes: it reads its previous")


def _spec(shape: tuple, **dims: tuple[int, int]) -> BreakOpSpec:
    def op(x: torch.Tensor, out: torch.Tensor) -> None:
        out.copy_(x)

    arg = TensorArg(shape, torch.float32)
    return BreakOpSpec(fn=op, args={"x": arg, "out": arg}, dims=dims, writes=("out",))


def test_shape_entries_may_be_dim_expressions():
    spec = _spec(("batch+1", "2*heads"), batch=(1, 3), heads=(1, 2))
    validate(spec)
    assert resolve_shape(spec.args["x"], {"batch": 3, "heads": 2}) == (4, 4)


@pytest.mark.parametrize(
    "shape, says",
    [
        (("batch+",), "'batch+', which is not a dim expression"),
        (("__import__('os').getpid()",), "which is not a dim expression"),
        (("batch**2",), "which is not a dim expression"),
        (("seq+1",), "uses dim 'seq', which dims does not declare"),
        (("batch-1",), "has size 'batch-1' = 0 (batch=1)"),
        (("batch//2+1",), "dim 'batch' appears only in shape expressions that do not determine"),
    ],
)
def test_a_bad_shape_expression_is_one_error_line_at_spec_load(capsys, shape, says):
    spec = _spec(shape, batch=(1, 3))
    module = type(sys)("bad_shape_spec")
    module.SPEC = spec
    sys.modules["bad_shape_spec"] = module
    try:
        assert main(["fuzz-op", "bad_shape_spec:SPEC", "--device", "sim", "--examples", "1"]) == 2
    finally:
        del sys.modules["bad_shape_spec"]
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], captured.err
    assert not captured.out


@pytest.mark.sim
def test_the_cu_seqlens_example_runs_through_fuzz_op():
    ref = "examples.varlen_prefill:SPEC"
    command = [sys.executable, "-m", "verification", "fuzz-op", ref, "--device", "sim"]
    command += ["--examples", "8", "--seed", "1"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"contract of {ref}: kept" in done.stdout
    assert "ran in 8 of 8 programs" in done.stdout and "Traceback" not in done.stderr
    spec = load_spec(ref).spec
    assert spec.args["cu_seqlens"].shape == ("batch+1",)
    assert spec.args["cu_seqlens"].dtype == torch.int32
