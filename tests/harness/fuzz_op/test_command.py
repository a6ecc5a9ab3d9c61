"""``fuzz-op`` and its pieces: the op runs in every program, broken contracts are named in
plain words, findings reproduce through the user's module, and bad specs exit 2 in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from tests.child_env import child_env
from tests.faulty_ops import FAULTY
from verification.commands.cli import main
from verification.fuzz import CampaignConfig, run_campaign
from verification.ops.spec import TensorMeta
from verification.targets import load_target
from verification.userops.campaign import load_user_ops, op_campaign
from verification.userops.contract import (
    Case,
    cases,
    check_earlier_calls,
    check_sizes_in_one_pool,
    diagnose,
)
from verification.userops.programs import POSITIONS, break_positions, op_programs, user_op
from verification.userops.spec import load_spec

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ("examples.varlen_attention:SPEC", "examples.masked_compaction:SPEC")


def _env() -> dict[str, str]:
    return child_env()


@pytest.mark.parametrize("name", list(FAULTY))
def test_diagnosis_names_the_one_part_each_planted_op_breaks(bcg_device, name):
    violations = diagnose(load_spec(f"tests.faulty_ops:{name}"), bcg_device)
    assert [v.violation for v in violations] == [FAULTY[name]], [v.summary() for v in violations]
    assert len(violations[0].message.split()) > 12  # a sentence a person can act on


@pytest.mark.parametrize(
    "ref", ["tests.faulty_ops:CLEAN", "tests.faulty_ops:CLEAN_SIDE_STREAM", *EXAMPLES]
)
def test_ops_that_keep_their_contract_pass_every_check(bcg_device, ref):
    violations = diagnose(load_spec(ref), bcg_device)
    assert not violations, [v.summary() for v in violations]


def test_every_program_calls_the_op_and_every_break_position_occurs():
    user = user_op(load_spec("examples.masked_compaction:SPEC"))
    names = {user.direct.name, user.nested.name}
    seen: list[list[set[str]]] = []

    @settings(max_examples=80, database=None, suppress_health_check=list(HealthCheck))
    @given(op_programs([user]))
    def draw(program):
        seen.append(break_positions(program, names))

    draw()
    assert all(1 <= len(calls) <= 3 for calls in seen)
    assert {p for calls in seen for where in calls for p in where} == set(POSITIONS)


def test_campaign_finds_host_lengths_cached_per_buffer_and_reproducer_fails(bcg_kind, tmp_path):
    ref = "tests.faulty_ops:FROZEN_BY_ADDRESS"
    target = load_target("breakable_cudagraph")
    base = CampaignConfig(target, bcg_kind, max_ops=4, max_breaks=2, report_dir=tmp_path)
    config, coverage = op_campaign(base, [ref], load_user_ops([ref]))
    result = run_campaign(config)
    assert result.findings, coverage.lines()
    text = result.reproducers[0]
    assert "_fresh_module('tests.faulty_ops').FROZEN_BY_ADDRESS" in text
    assert f"Fuzzer command: python -m verification fuzz-op {ref} " in text
    done = subprocess.run(
        [sys.executable, str(result.reproducer_paths[0])],
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0 and "differs from eager" in done.stderr, done.stderr


def test_fuzz_op_cli_names_the_broken_contract_and_counts_break_positions(bcg_kind):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "verification",
            "fuzz-op",
            "tests.faulty_ops:FRESH_RETURN",
            "--device",
            bcg_kind,
            "--examples",
            "3",
            "--no-isolate",
        ],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "harness-error" not in done.stdout
    said = "FINDING [op-bug] contract declared writes: it returns a fresh tensor instead of writing"
    assert said in done.stdout
    assert "vLLM" not in done.stdout  # the message fits every contract, `returns` too
    assert "ran in 3 of 3 programs" in done.stdout and "by break position: first" in done.stdout


@pytest.mark.parametrize(
    "ref, says",
    [
        ("no_such_module:SPEC", "does not import"),
        ("tests.bad_op_specs:MISSING", "has no attribute"),
        ("tests.bad_op_specs:NOT_A_SPEC", "not a verification.BreakOpSpec"),
        ("tests.bad_op_specs:EMPTY_DIM_RANGE", "shapes cannot be satisfied"),
        ("tests.bad_op_specs:BOUNDS_NEVER_MET", "shapes cannot be satisfied"),
        ("tests.bad_op_specs:UNDECLARED_DIM", "shapes cannot be satisfied"),
        ("tests.bad_op_specs:ARG_NOT_TAKEN", "takes no argument 'y'"),
        ("tests.bad_op_specs", "expected MODULE:SPEC"),
    ],
)
def test_bad_op_spec_is_one_error_line_and_exit_2(capsys, ref, says):
    assert main(["fuzz-op", ref, "--device", "sim", "--examples", "1"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], captured.err
    assert not captured.out


def test_certify_with_a_faulty_op_fails_naming_the_op_and_the_part(bcg_kind, tmp_path):
    out = tmp_path / "cert"
    ref = "tests.faulty_ops:FRESH_RETURN"
    argv = ["certify", "--device", bcg_kind, "--examples", "3", "--no-sensitivity"]
    argv += ["--ops", ref, "--out", str(out)]
    # The certificate goes with the op's pull request too: a broken op fails it.
    assert main(argv) == 1
    cert = json.loads((out / "certificate.json").read_text())
    (ops,) = [c for c in cert["checks"] if c["name"] == "ops"]
    assert ops["verdict"] == "fail" and ops["examples"] >= 1
    assert any("fresh tensor" in f["message"] for f in ops["findings"])
    coverage = cert["coverage"]["registered_ops"]
    assert coverage[f"{ref} programs_with_op"] == coverage[f"{ref} programs"] >= 1
    text = (out / "certificate.md").read_text()
    assert "# Certificate: FAIL for `breakable_cudagraph`" in text
    assert f"**op-bug** declared writes: op {ref}: it returns a fresh tensor" in text
    assert f"{ref} nested" in coverage


def test_certify_with_an_op_that_does_not_import_is_one_error_line(capsys, tmp_path):
    argv = ["certify", "--device", "sim", "--ops", "no_such_module:SPEC", "--out", str(tmp_path)]
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "does not import" in lines[0]


def test_an_unjoined_op_is_judged_on_the_join_alone(monkeypatch, bcg_device):
    # On the H200 the values an unjoined op writes race with its side stream, so checks of
    # those values failed too (stale results looked like "state across calls").
    from verification.userops import contract as opcontract

    def every_part_fails(part):
        return lambda loaded, case, device: opcontract.broken(part, "m")

    fakes = tuple((part, every_part_fails(part)) for part, _ in opcontract.CHECKS)
    monkeypatch.setattr(opcontract, "CHECKS", fakes)
    violations = diagnose(load_spec("tests.faulty_ops:UNJOINED_STREAM"), bcg_device, examples=1)
    kept = ["index bounds", "unique indices", "streams joined", "concurrent capture"]
    assert [v.violation for v in violations] == kept


def test_an_op_that_is_not_deterministic_is_judged_without_the_checks_that_compare_values(
    monkeypatch, bcg_device
):
    # Values that change from call to call fail every comparison by chance.
    from verification.userops import contract as opcontract

    def every_part_but_the_join_fails(part):
        if part == opcontract.UNJOINED:
            return lambda loaded, case, device: None
        return lambda loaded, case, device: opcontract.broken(part, "m")

    fakes = tuple((part, every_part_but_the_join_fails(part)) for part, _ in opcontract.CHECKS)
    monkeypatch.setattr(opcontract, "CHECKS", fakes)
    violations = diagnose(load_spec("tests.faulty_ops:UNJOINED_STREAM"), bcg_device, examples=1)
    kept = ["deterministic", "index bounds", "unique indices", "concurrent capture"]
    assert [v.violation for v in violations] == kept


def test_state_one_batch_size_leaves_for_another_is_named_as_a_capture_set_calls_the_op(
    bcg_device,
):
    # The op keeps a workspace per buffer: right for one size, wrong once the sizes of a
    # capture set slice one buffer, which no check calling it at one size sees.
    faulty = load_spec("tests.faulty_ops:WORKSPACE_PER_BUFFER")
    meta = TensorMeta((8,), torch.float32)
    case = Case({"n": 8}, (meta, meta), {}, 0)
    assert check_earlier_calls(faulty, case, bcg_device) is None
    found = check_sizes_in_one_pool(faulty, case, bcg_device)
    assert found is not None and found.violation == "sizes in one pool"
    assert "called at sizes (n=8) > (n=4) > (n=1)" in found.message
    assert diagnose(faulty, bcg_device)  # reused addresses show its state elsewhere too
    for ref in ("tests.faulty_ops:CLEAN", *EXAMPLES):
        clean = load_spec(ref)
        for case in _cases(clean, bcg_device):
            assert check_sizes_in_one_pool(clean, case, bcg_device) is None, (ref, case)


def _cases(loaded, device: str) -> list[Case]:
    drawn: list[Case] = []

    @settings(max_examples=5, database=None, suppress_health_check=list(HealthCheck))
    @given(cases(loaded.spec))
    def draw(case):
        drawn.append(case)

    draw()
    return drawn
