"""The spec vocabulary of real engine ops (masked writes, inout buffers, dim
expression bounds, unique indices, sentinels), each part's planted fault named for that part,
the declared-writes check for every dtype, the campaign finding state kept across calls, and
every malformed spec one line and exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.child_env import child_env
from tests.faulty_ops import CLEAN_FEATURES, FAULTY_FEATURES
from verification.commands.cli import main
from verification.fuzz import CampaignConfig, run_campaign
from verification.ops.spec import TensorMeta
from verification.targets import load_target
from verification.userops.campaign import load_user_ops, op_campaign
from verification.userops.contract import Case, check_declared_writes, diagnose, materialize
from verification.userops.spec import BreakOpSpec, LoadedSpec, TensorArg, load_spec

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", list(FAULTY_FEATURES))
def test_each_new_feature_has_a_planted_fault_named_for_its_own_part(bcg_device, name):
    violations = diagnose(load_spec(f"tests.faulty_ops:{name}"), bcg_device)
    assert [v.violation for v in violations] == [FAULTY_FEATURES[name]], [
        f"{v.violation}: {v.message}" for v in violations
    ]


@pytest.mark.parametrize(
    "ref",
    [
        *(f"tests.faulty_ops:{n}" for n in CLEAN_FEATURES),
        "examples.paged_kv_cache:SPEC",
        "examples.dynamic_int8_quant:SPEC",
    ],
)
def test_correct_ops_using_each_feature_keep_their_contract(bcg_device, ref):
    violations = diagnose(load_spec(ref), bcg_device, examples=10)
    assert not violations, [f"{v.violation}: {v.message}" for v in violations]


def test_masked_write_message_names_the_argument_and_where(bcg_device):
    (violation,) = diagnose(load_spec("tests.faulty_ops:WRITES_OUTSIDE_MASK"), bcg_device)
    assert "'out' outside the elements its partial= mask allows" in violation.message


def test_undeclared_write_message_says_later_segments_read_the_modified_value(bcg_device):
    (violation,) = diagnose(load_spec("tests.faulty_ops:WRITES_UNDECLARED"), bcg_device)
    assert "read the modified 'x'" in violation.message and "as it was" not in violation.message


DTYPES = [
    torch.int8,
    torch.uint8,
    torch.int32,
    torch.int64,
    torch.bool,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
]


def _cast_into(x: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_((x > 0) if out.dtype == torch.bool else x.clamp(0, 3).to(out.dtype))


def _forgets(x: torch.Tensor, out: torch.Tensor) -> None:
    pass


def _loaded(fn, dtype: torch.dtype) -> tuple[LoadedSpec, Case]:
    spec = BreakOpSpec(
        fn=fn,
        args={"x": TensorArg(("n",)), "out": TensorArg(("n",), dtype)},
        dims={"n": (4, 4)},
        writes=("out",),
    )
    metas = (TensorMeta((4,), torch.float32), TensorMeta((4,), dtype))
    return LoadedSpec(spec, "m", "SPEC", None), Case({"n": 4}, metas, {}, 0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_declared_writes_check_fills_outputs_of_every_dtype(dtype):
    # ±7777 fits no int8, uint8 or float8 tensor: the check raised for quantizing ops.
    assert check_declared_writes(*_loaded(_cast_into, dtype), "cpu") is None
    caught = check_declared_writes(*_loaded(_forgets, dtype), "cpu")
    assert caught is not None and "never writes its declared output 'out'" in caught.message


def test_drawn_indices_meet_dim_expressions_uniqueness_and_sentinels():
    spec = load_spec("examples.paged_kv_cache:SPEC").spec
    seen_padding = seen_top = 0
    for seed in range(60):
        binding = {"tokens": 8, "heads": 1, "head_size": 1, "blocks": 2, "block_size": 4}
        metas = tuple(
            TensorMeta(
                tuple(binding[d] if isinstance(d, str) else d for d in a.shape),
                torch.int64 if n == "slot_mapping" else torch.float32,
            )
            for n, a in spec.args.items()
        )
        slots = materialize(spec, Case(binding, metas, {}, seed), seed, "cpu")["slot_mapping"]
        valid = slots[slots >= 0]
        assert bool(((slots == -1) | ((slots >= 0) & (slots <= 7))).all()), slots
        assert valid.unique().numel() == valid.numel(), slots  # distinct, padding aside
        seen_padding += int((slots == -1).sum())
        seen_top += int((slots == 7).any())
    assert 0.15 < seen_padding / (60 * 8) < 0.45  # sentinel_rate=0.3
    assert seen_top > 0  # the bound blocks*block_size-1 is reached


def _campaign(ref: str, kind: str, report: Path | None = None, examples: int = 30):
    target = load_target("breakable_cudagraph")
    base = CampaignConfig(
        target, kind, examples=examples, max_ops=4, max_breaks=2, report_dir=report
    )
    config, _ = op_campaign(base, [ref], load_user_ops([ref]))
    return run_campaign(config)


@pytest.mark.parametrize("name", ["STASHED_TENSOR", "FROZEN_HOST_VALUE"])
def test_campaign_alone_finds_state_kept_across_calls_and_reproducer_fails(
    bcg_kind, tmp_path, name
):
    # The eager reference once shared the op's module state with the captured run, which
    # hid both faults from the campaign: only the contract pre-check caught them.
    result = _campaign(f"tests.faulty_ops:{name}", bcg_kind, report=tmp_path)
    assert result.findings and result.findings[0].violation == "mismatch"
    done = subprocess.run(
        [sys.executable, str(result.reproducer_paths[0])],
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0 and "differs from eager" in done.stderr, done.stderr


BAD_SPECS = {
    "DIM_NOT_A_RANGE": "dim 'n' has range 4; give (low, high)",
    "PARAM_NOT_A_STRATEGY": "params['threshold'] is a float, not a hypothesis strategy",
    "SHAPE_IS_A_STRING": "argument 'x' has shape 'n', a string; give a tuple",
    "WRITES_IS_A_STRING": "writes='out' is a str; give a tuple",
    "ARG_NOT_A_TENSOR_ARG": "args['x'] is a tuple, not a TensorArg",
    "NOT_A_DIM_EXPRESSION": "high='n -', which is not a dim expression",
    "EXPRESSION_NAMES_UNKNOWN_DIM": "names dim 'm', which dims does not declare",
    "UNIQUE_WITHOUT_ROOM": "is unique but has 4 elements and only 2 values",
    "UNIQUE_FLOATS": "unique values need an integer dtype",
    "UNIQUE_UNBOUNDED": "is unique: give both low and high",
    "SENTINEL_DOES_NOT_FIT": "sentinel -1 does not fit dtype torch.uint8",
    "RATE_WITHOUT_SENTINEL": "has sentinel_rate but no sentinel value",
    "RATE_OUT_OF_RANGE": "sentinel_rate=1.5; need 0 < rate <= 1",
    "BOUNDS_ON_OVERWRITTEN": "written argument 'idx' cannot have value bounds",
    "WRITES_AND_INOUT": "'out' is in both writes and inout",
    "INOUT_NOT_AN_ARG": "inout names 'cache', which is not one of args",
    "PARTIAL_NOT_WRITTEN": "partial names 'x', which is in neither writes nor inout",
    "PARTIAL_NOT_A_FUNCTION": "partial['out'] is a str, not a mask function",
    "BOUND_DOES_NOT_FIT_DTYPE": "bound 300 does not fit its dtype",
}


@pytest.mark.parametrize("name", list(BAD_SPECS))
def test_malformed_spec_is_one_error_line_and_exit_2(capsys, name):
    argv = ["fuzz-op", f"tests.bad_op_specs:{name}", "--device", "sim", "--examples", "1"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert BAD_SPECS[name] in lines[0], lines[0]
    assert not captured.out


@pytest.mark.parametrize("count", ["0", "-3"])
def test_contract_examples_below_one_is_a_usage_error(capsys, count):
    argv = ["fuzz-op", "tests.faulty_ops:CLEAN", "--device", "sim", "--examples", "1"]
    assert main([*argv, "--contract-examples", count]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "--contract-examples" in lines[0] and "at least 1" in lines[0]


def test_certify_with_a_stashing_op_fails_naming_the_op_and_the_part(bcg_kind, tmp_path):
    ref = "tests.faulty_ops:STASHED_TENSOR"
    argv = ["certify", "--device", bcg_kind, "--examples", "5", "--no-sensitivity"]
    assert main([*argv, "--ops", ref, "--out", str(tmp_path)]) == 1
    text = (tmp_path / "certificate.md").read_text()
    assert "FAIL for `breakable_cudagraph`" in text
    assert f"**op-bug** no state across calls: op {ref}: it stashes a tensor" in text
    assert "target-bug" not in text


def test_fuzz_op_blames_the_op_for_state_it_keeps_and_writes_every_reproducer(bcg_kind, tmp_path):
    ref = "tests.faulty_ops:STASHED_TENSOR"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "verification",
            "fuzz-op",
            ref,
            "--device",
            bcg_kind,
            "--examples",
            "20",
            "--no-isolate",
            "--report",
            str(tmp_path),
        ],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "harness-error" not in done.stdout
    assert "[target-bug]" not in done.stdout and "FINDING [op-bug] mismatch" in done.stdout
    assert "argument 'out' of stashed_scale" in done.stdout  # named as the spec names it
    last = done.stdout.strip().splitlines()[-1]
    assert " 2 findings," in last and "1 of them contract violations" in last, last
    scripts = sorted(p.name for p in tmp_path.glob("*.py"))
    assert scripts == ["contract_0_no_state_across_calls.py", "finding_0_mismatch.py"], scripts
    for script in scripts:
        text = (tmp_path / script).read_text()
        assert f"Fuzzer command: python -m verification fuzz-op {ref} " in text
        rerun = subprocess.run(
            [sys.executable, str(tmp_path / script)],
            cwd=tmp_path,
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert rerun.returncode != 0, (script, rerun.stdout, rerun.stderr)


def test_a_target_bug_under_a_correct_op_stays_a_target_bug(bcg_kind, tmp_path):
    # The blame must not swing the other way: a perfect re-run of the program with the same
    # op agrees with eager, so the mismatch is the target's (breaks replay on clones).
    (tmp_path / "frozen_args_target.py").write_text(
        "from verification.planted.targets import build\n"
        "globals().update({k: v for k, v in vars(build('args_frozen')).items() "
        "if k != '__name__'})\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "verification",
            "fuzz-op",
            "examples.masked_compaction:SPEC",
            "--target",
            "frozen_args_target",
            "--device",
            bcg_kind,
            "--examples",
            "30",
            "--no-isolate",
        ],
        cwd=ROOT,
        env=child_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "harness-error" not in done.stdout
    assert "FINDING [target-bug]" in done.stdout and "[op-bug]" not in done.stdout


@pytest.mark.sim
def test_an_op_raising_on_capture_time_values_is_an_op_bug(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "verification",
            "fuzz-op",
            "tests.faulty_ops:TRUSTS_CAPTURE_VALUES",
            "--device",
            "sim",
            "--examples",
            "40",
        ],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "harness-error" not in done.stdout
    assert "FINDING [op-bug] exception" in done.stdout, done.stdout[-3000:]
    assert "capture-time garbage" in done.stdout and "[target-bug]" not in done.stdout
