"""Contracts are data: targets declare theirs (undeclared means vLLM's out-buffer), the CLI may
override it, and a finding on a program that breaks the contract blames the op, not the target."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.oracle_programs import OPS, TWO_BREAKS
from verification.certify.run import CheckResult
from verification.errors import UsageError
from verification.findings import FINDING_KINDS, Finding, about_target, fails_certificate
from verification.oracle import check_program, fresh_returns_read
from verification.planted import targets as planted_targets
from verification.planted import vllm_minimal
from verification.programs import op_table
from verification.targets import load_target
from verification.targets.contracts import declared_contract, get_contract


def test_unknown_contract_is_a_usage_error_naming_the_choices():
    with pytest.raises(UsageError, match=r"unknown contract 'vllm'.*out-buffer, returns"):
        get_contract("vllm")


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ({}, "out-buffer"),
        ({"BREAK_CONTRACT": "returns"}, "returns"),
        ({"BREAK_CONTRACT": "out-buffer"}, "out-buffer"),
        ({"SUPPORTS_TENSOR_RETURNS": True}, "returns"),
        ({"SUPPORTS_TENSOR_RETURNS": False}, "out-buffer"),
        ({"BREAK_CONTRACT": "out-buffer", "SUPPORTS_TENSOR_RETURNS": True}, "out-buffer"),
    ],
)
def test_declared_contract_reads_the_declaration_its_alias_or_defaults_to_out_buffer(
    attributes, expected
):
    assert declared_contract(SimpleNamespace(**attributes)).name == expected


def test_library_declares_returns_and_override_wins():
    assert load_target("breakable_cudagraph").contract.name == "returns"
    assert load_target("breakable_cudagraph", "out-buffer").contract.name == "out-buffer"
    with pytest.raises(UsageError):
        load_target("breakable_cudagraph", "nonsense")


def test_fresh_return_read_later_is_found_statically():
    table = op_table(OPS)
    assert fresh_returns_read(TWO_BREAKS, table) == [1]


def test_vllm_target_on_a_fresh_return_is_an_op_contract_finding(bcg_device):
    finding = check_program(TWO_BREAKS, load_target(vllm_minimal.build(None)), bcg_device, ops=OPS)
    assert finding is not None and finding.kind == "op-contract", finding
    assert "step 1 (host_scale)" in finding.message


def test_same_program_under_returns_passes_on_a_refreshing_target(bcg_device):
    target = load_target(planted_targets.build(None))
    assert check_program(TWO_BREAKS, target, bcg_device, ops=OPS) is None


def test_a_refreshing_bug_under_returns_stays_a_target_bug(bcg_device):
    target = load_target(planted_targets.build("output_not_copied_back"))
    finding = check_program(TWO_BREAKS, target, bcg_device, seed=5, ops=OPS)
    assert finding is not None and finding.kind == "target-bug"


def _result(*kinds: str) -> CheckResult:
    findings = [Finding(kind, "fuzz", "m", "mismatch", TWO_BREAKS, 0) for kind in kinds]
    return CheckResult("fuzz", 1, 0.1, findings)


def test_only_target_bugs_and_bugs_of_the_users_op_under_test_fail_a_check():
    # op-bug: a user's op certified with --ops is broken; that certificate goes with the op.
    assert [k for k in FINDING_KINDS if fails_certificate(k)] == ["target-bug", "op-bug"]
    assert _result().verdict == "pass"
    assert _result("op-bug").verdict == "fail"
    assert _result("op-contract", "harness-error").verdict == "explained"
    assert _result("op-contract", "target-bug").verdict == "fail"


def test_checker_notes_leave_the_verdict_and_are_listed_apart_from_findings():
    # known-unsafe and torch-limit are true of every target, undecided says what a run could
    # not decide: a note, not a finding.
    import verification.properties  # noqa: F401 - registers the property checks' kinds
    from verification.certify.certificate import markdown

    notes = [k for k in FINDING_KINDS if not about_target(k)]
    assert set(notes) == {"known-unsafe", "torch-limit", "undecided"}
    assert _result(*notes).verdict == "pass"
    assert _result("memory-held", *notes).verdict == "explained"
    finding = {"violation": "v", "message": "m", "explanation": "e", "steps": 1, "seed": 0}
    cert = {
        "verdict": "pass",
        "simulated": True,
        "passed": True,
        "command": None,
        "total_seconds": None,
        "target": {"name": "t", "version": None, "describe": "not in a git repository"},
        "contract": {"name": "returns", "source": "declared", "summary": "s"},
        "profile": {"name": "quick", "overrides": {}, "label": "quick"},
        "device": "sim",
        "environment": dict.fromkeys(("gpu", "driver", "cuda", "torch", "hypothesis", "python")),
        "settings": dict.fromkeys(
            ("profile", "seed", "examples", "max_ops", "max_breaks", "replays")
        ),
        "checks": [
            {
                "name": "pool",
                "kind": "property",
                "examples": 1,
                "seconds": 0,
                "verdict": "pass",
                "findings": [{**finding, "kind": "known-unsafe"}],
            },
        ],
        "coverage": {},
        "sensitivity": None,
        "sensitivity_skipped": "--no-sensitivity was given",
        "date": "d",
    }
    text = markdown(cert)
    findings, notes_part = text.split("## Checker notes")
    assert "## Findings\n\nnone" in findings and "known-unsafe" in notes_part
