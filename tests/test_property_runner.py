"""Property 7, the runner: the library's BreakableGraphRunner holds it, the checker finds each
planted runner bug, and a target without a runner is reported not applicable."""

from __future__ import annotations

import pytest
from hypothesis import settings

from tests.property_checks import check, failing
from verification.certify.property_check import run_properties
from verification.planted.property_targets import BUGS
from verification.targets import load_target

# Each planted runner bug and what the finding must say.
RUNNER_BUGS = {
    "runner_stale_inputs": "call 'repeat': output",
    "runner_recaptures": "a repeated signature ran the function",
    "runner_ignores_pool": "did not allocate in the runner's pool",
    "runner_eager_results_stale": "graphs disabled, call 'repeat': output",
    "runner_debug_blind": "debug=True did not report",
    "runner_leaves_its_stream": "the caller's stream is not current",
    "runner_fn_positional_only": "fn by keyword, default warmup: making a runner",
    "runner_options_by_position": "an option by position: making a runner was accepted",
    "runner_refuses_no_warmup": "warmup=0: making a runner and calling it raised ValueError",
    "runner_warms_up_at_least_once": "warmup=0: a new signature ran the function 2 times",
    "runner_no_replay_without_warmup": "warmup=0: the result differs from eager",
    "runner_warms_up_at_most_once": "warmup=2: a new signature ran the function 2 times",
    "runner_no_default_warmup": "declares a default warmup of 0",
    "runner_default_warmup_not_as_declared": "default warmup: a new signature ran the function 3",
    "runner_accepts_negative_warmup": "warmup=-1: making a runner was accepted",
    "runner_negative_warmup_type_error": "warmup=-1: making a runner raised TypeError",
    "runner_accepts_bool_warmup": "warmup=True: making a runner was accepted",
    "runner_accepts_float_warmup": "warmup=1.5: making a runner was accepted",
    "runner_warmup_error_unnamed": "does not name 'warmup'",
    "runner_accepts_uncallable": "(42): making a runner was accepted",
    "runner_refusal_leaves_its_stream": "another stream is current after the refusal",
    "runner_refusal_leaves_a_capture_active": "a capture is active after the refusal",
}


def test_library_runner_captures_per_signature_and_equals_eager(bcg_kind, tmp_path):
    findings = check("runner", None, bcg_kind, tmp_path)
    assert not failing(findings), failing(findings)[0].message


def test_every_planted_runner_bug_has_its_expected_finding():
    assert set(RUNNER_BUGS) == {name for name, (_, prop, _) in BUGS.items() if prop == "runner"}


@pytest.mark.parametrize("bug", RUNNER_BUGS)
def test_planted_runner_bug_is_found(bug, bcg_kind, tmp_path):
    findings = failing(check("runner", bug, bcg_kind, tmp_path))
    assert findings, BUGS[bug][0]
    assert RUNNER_BUGS[bug] in findings[0].message, findings[0].message


def test_target_without_a_runner_is_not_applicable_and_not_failed(bcg_kind):
    [result] = run_properties(
        "runner",
        load_target("verification.planted.vllm_minimal"),
        bcg_kind,
        settings.default.max_examples,
    )
    assert result.not_applicable and "BreakableGraphRunner" in result.not_applicable
    assert not result.failed and not result.findings and result.examples == 0
