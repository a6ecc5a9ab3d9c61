"""``bisect`` names the op and the line of each planted model's one bug, and finds nothing in
correct models; the command's exit codes and one-line errors."""

from __future__ import annotations

import operator
import os

import pytest

import tests.harness.bisect.early_breaks  # noqa: F401  (imported before bisect: see the module)
from tests.harness.bisect.planted_models import bug_line
from verification.bisect import bisect
from verification.commands import cli
from verification.planted.targets import build
from verification.targets import load_target

MODELS = "tests.harness.bisect.planted_models"
PLANTED_FILE = os.path.join("tests", "harness", "bisect", "planted_models.py")

# model -> (kind of finding, op, the # BUG marker of the line it must name)
PLANTED = {
    "frozen_host_value": ("host scalar", "aten.div.Tensor", "frozen"),
    "cpu_scalar_temperature": ("host scalar", "aten.div.Tensor", "host scalar"),
    "rebound_positions": ("rebound tensor", "aten._to_copy.default", "rebound positions"),
    "attention_not_a_break": ("frozen host value", "aten.slice.Tensor", "attention"),
    "break_caches_a_tensor": ("break state", "aten.sub.Tensor", "cached"),
    "rebound_input": ("rebound tensor", "aten.mm.default", "rebound"),
    "host_branch": ("host branch", "aten.add.Tensor", "branch"),
    "break_gets_a_host_number": ("frozen host value", "break scaled_break", "break argument"),
}


def _named(result, kind: str, op: str, marker: str) -> None:
    finding = result.finding
    assert finding is not None, result.line()
    assert (finding.kind, finding.op) == (kind, op), "\n".join(finding.lines())
    assert finding.site is not None and finding.site[0].endswith(PLANTED_FILE)
    assert finding.site[1] == bug_line(marker), "\n".join(finding.lines())


@pytest.mark.parametrize("model", list(PLANTED))
def test_each_planted_model_is_named_to_its_op_and_line(bcg_kind, model):
    kind, op, marker = PLANTED[model]
    _named(bisect(f"{MODELS}:{model}", kind=bcg_kind, steps=3), kind, op, marker)


def test_a_host_read_the_capture_refuses_is_named_at_its_line(bcg_kind):
    result = bisect(f"{MODELS}:host_read_not_a_break", kind=bcg_kind, steps=2)
    finding = result.finding
    assert finding is not None and finding.kind == "capture raised", result.line()
    assert finding.site is not None and finding.site[1] == bug_line("host read")
    assert "must run in a break" in finding.reason


def test_a_host_scalar_is_said_to_be_baked_into_the_graph_with_the_fix(bcg_kind):
    finding = bisect(f"{MODELS}:cpu_scalar_temperature", kind=bcg_kind, steps=3).finding
    assert finding is not None and finding.kind == "host scalar", finding
    assert "0-dim CPU tensor: 1.0 at capture" in finding.reason, finding.reason
    assert "baked 1.0 into the graph" in finding.reason
    assert 'device="cuda"' in finding.reason


def test_a_break_whose_result_the_library_refuses_at_replay_is_the_user_s_line_and_exit_1(
    bcg_kind, capsys
):
    ref = f"{MODELS}:returns_argument_or_new"
    status = cli.main(["bisect", ref, "--device", bcg_kind, "--steps", "3"])
    out = capsys.readouterr()
    assert status == 1, out
    call, returned = bug_line("refused break"), bug_line("returns its argument")
    last = out.out.splitlines()[-1]
    assert last.startswith("bisect: replay raised: break penalize at "), last
    assert f"{PLANTED_FILE}:{call} (change {PLANTED_FILE}:{returned}), at step 1" in last
    assert "a new tensor every time" in out.out and "harness failed" not in out.err


def test_an_error_the_target_raises_with_no_line_of_the_user_s_is_a_finding(bcg_kind, monkeypatch):
    # The library's replay calls a builtin with the wrong arguments: raised in the target's
    # frame, below no line of the user's.
    monkeypatch.setattr("breakable_cudagraph.capture.copy_result_back", operator.truediv)
    finding = bisect(f"{MODELS}:returns_a_tensor", kind=bcg_kind, steps=2).finding
    assert finding is not None and finding.kind == "replay raised", finding
    assert finding.reason.startswith("TypeError: "), finding.reason
    assert finding.op == "break scaled" and finding.site is not None, finding


def test_an_error_of_the_harness_while_the_model_runs_still_exits_3(bcg_kind, monkeypatch, capsys):
    monkeypatch.setattr("verification.bisect.runs.copies", dict)  # raises in the harness's frame
    status = cli.main(["bisect", f"{MODELS}:correct", "--device", bcg_kind])
    assert status == 3
    assert "harness failed: " in capsys.readouterr().err


def test_a_stream_race_the_simulator_sees_is_named_where_the_unordered_read_is(bcg_kind):
    if bcg_kind != "sim":
        pytest.skip("on a GPU the race may or may not corrupt a value: only the simulator sees it")
    result = bisect(f"{MODELS}:stream_race", kind="sim", steps=2)
    _named(result, "stream race", "aten.mul.Tensor", "race")


def test_a_target_that_does_not_refresh_a_break_result_is_found_by_forcing_ops_into_breaks(
    bcg_kind,
):
    # Nothing the capture recorded differs from eager: only the forced breaks can see which
    # op first reads a wrong tensor, and that the tensor is the break's stale result.
    target = load_target(build("output_not_copied_back"))
    result = bisect(f"{MODELS}:returns_a_tensor", target=target, kind=bcg_kind, steps=2)
    _named(result, "stale break result", "aten.relu.default", "stale return")


def test_a_correct_model_gives_no_divergence_over_20_steps(bcg_kind):
    result = bisect(f"{MODELS}:correct", kind=bcg_kind, steps=20)
    assert result.finding is None and result.steps == 20, result.line()


def test_a_tiny_llama_with_a_varlen_attention_break_gives_no_divergence_over_20_steps(bcg_kind):
    pytest.importorskip("transformers")
    result = bisect("tests.harness.bisect.llama_model:llama", kind=bcg_kind, steps=20)
    assert result.finding is None and result.steps == 20, result.line()


def test_the_command_prints_the_op_and_exits_1(bcg_kind, capsys):
    status = cli.main(["bisect", f"{MODELS}:host_branch", "--device", bcg_kind, "--steps", "3"])
    out = capsys.readouterr().out
    assert status == 1, out
    assert f"host branch: aten.add.Tensor at {PLANTED_FILE}:{bug_line('branch')}" in out
    assert out.splitlines()[-1].startswith("bisect: host branch")


def test_the_command_exits_0_without_divergence(bcg_kind, capsys):
    status = cli.main(["bisect", f"{MODELS}:correct", "--device", bcg_kind, "--steps", "2", "-q"])
    out = capsys.readouterr().out
    assert status == 0 and out.splitlines() == [out.splitlines()[-1]], out
    assert "no divergence in 2 steps" in out


@pytest.mark.parametrize(
    "ref, message",
    [
        ("no_colon", "is not MODULE:FN"),
        (f"{MODELS}:missing", "has no function 'missing'"),
        ("tests.harness.bisect.no_such_module:fn", "cannot import"),
        (f"{MODELS}:wrong_shape", "returned int; it must return (forward, next_step)"),
        (f"{MODELS}:raises", "raised ValueError: no model here"),
        (f"{MODELS}:not_deterministic", "built two different models from the same seed"),
        (f"{MODELS}:break_decorated_too_early", "some break was decorated before bisect"),
    ],
)
def test_bad_models_are_one_error_line_and_exit_2(bcg_kind, capsys, ref, message):
    status = cli.main(["bisect", ref, "--device", bcg_kind])
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err


def test_a_failure_of_the_harness_itself_exits_3(bcg_kind, monkeypatch, capsys):
    # A comparison that raises from inside the harness, with no line of the user's on the stack.
    monkeypatch.setattr("verification.bisect.search.first_difference", dict)
    status = cli.main(["bisect", f"{MODELS}:correct", "--device", bcg_kind])
    assert status == 3
    assert "harness failed: TypeError" in capsys.readouterr().err


def test_the_example_transformer_is_named_at_its_host_dependent_slice(bcg_kind):
    from pathlib import Path

    result = bisect("examples.bisect_transformer:transformer", kind=bcg_kind, steps=2)
    source = Path("examples/bisect_transformer.py").read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if "# BUG" in text)
    finding = result.finding
    assert finding is not None and finding.op == "aten.slice.Tensor", result.line()
    assert finding.site is not None and finding.site[0].endswith("bisect_transformer.py")
    assert finding.site[1] == line and finding.kind == "frozen host value"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--target", "no_such_target_module"], "cannot be imported"),
        (["--steps", "0"], "must be at least 1"),
        (["--rtol", "-1"], "must be at least 0"),
    ],
)
def test_bad_options_are_one_error_line_and_exit_2(bcg_kind, capsys, extra, message):
    status = cli.main(["bisect", f"{MODELS}:correct", "--device", bcg_kind, *extra])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and message in err, err


@pytest.mark.parametrize(
    "ref",
    [
        f"{MODELS}:frozen_host_value",
        f"{MODELS}:cpu_scalar_temperature",
        "examples.bisect_transformer:transformer",
    ],
)
def test_a_frozen_host_value_comes_with_a_standalone_script_that_fails_while_it_is_frozen(
    bcg_kind, ref
):
    from verification.devices import device_context

    finding = bisect(ref, kind=bcg_kind, steps=3).finding
    assert finding is not None and finding.reproducer is not None, finding
    namespace = {"__name__": "reproducer"}
    exec(compile(finding.reproducer, "reproducer.py", "exec"), namespace)
    with device_context(bcg_kind), pytest.raises(SystemExit) as exit_status:
        namespace["main"]()
    assert exit_status.value.code == 1


def test_under_a_vllm_named_target_the_model_s_breaks_are_the_target_s(bcg_kind):
    # The model decorates with this library's names; bisect routes them to the target's
    # decorator, so the target's own capture and contract (out-buffer) run it.
    result = bisect(
        f"{MODELS}:break_caches_a_tensor",
        target=load_target("verification.planted.vllm_minimal"),
        kind=bcg_kind,
        steps=2,
    )
    _named(result, "break state", "aten.sub.Tensor", "cached")
