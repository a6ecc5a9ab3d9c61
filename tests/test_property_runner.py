"""Property 7, the runner: the library's BreakableGraphRunner holds it, the checker finds each
planted runner bug, and a target without a runner is reported not applicable."""

from __future__ import annotations

import pytest
from hypothesis import settings

from tests.planted_property_targets import BUGS
from tests.property_checks import check, failing
from verification.check_command import run_properties
from verification.targets import load_target

# Each planted runner bug and what the finding must say.
RUNNER_BUGS = {
    "runner_stale_inputs": "call 'repeat': output",
    "runner_recaptures": "a repeated signature ran the function",
    "runner_ignores_pool": "did not allocate in the runner's pool",
    "runner_eager_results_stale": "graphs disabled, call 'repeat': output",
    "runner_debug_blind": "debug=True did not report",
    "runner_leaves_its_stream": "the caller's stream is not current",
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
        "runner", load_target("tests.vllm_minimal"), bcg_kind, settings.default.max_examples
    )
    assert result.not_applicable and "BreakableGraphRunner" in result.not_applicable
    assert not result.failed and not result.findings and result.examples == 0
