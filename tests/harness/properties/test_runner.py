"""Property 7, the runner: the library's BreakableGraphRunner holds it, the checker finds each
planted runner bug, and a target without a runner is reported not applicable."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from tests.child_env import child_env
from tests.program_metas import value_metas
from tests.property_checks import CI_CYCLES, check, failing
from verification.findings import Finding
from verification.planted import runner_targets
from verification.planted.property_targets import BUGS
from verification.properties.base import property_finding
from verification.properties.processes import run_properties
from verification.properties.runner import FIXED_PROGRAMS, OPS
from verification.targets import load_target

ROOT = Path(__file__).resolve().parents[3]

# Each planted runner bug and what the finding must say.
RUNNER_BUGS = {
    "runner_stale_inputs": "graphs on, call 'repeat': the caller's",
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


# Each planted runner of verification/planted/runner_targets.py and what the finding must say.
EAGER_SEMANTICS_BUGS = {
    "runner_no_write_back": "graphs on, call 'first': the caller's t0 afterwards",
    "runner_warmup_write_twice": "graphs on, call 'first': the caller's t0 afterwards",
    "runner_capture_write_twice": "graphs on, call 'first': the caller's t0 afterwards",
    "runner_warmup_write_twice_eager": "graphs disabled, call 'first': the caller's t0",
    "runner_alias_output_copied": "output 0 has memory of its own, where eager's is t0 itself",
    "runner_alias_view_per_output": "output 4 views t0 (shape (8, 4), strides (1, 8), 0 bytes in), where eager's is output 1 itself",
    "runner_signature_ignores_values": "call 'new shift': output",
}


def _check_planted_runner(variant: str, kind: str, tmp_path: Path) -> list[Finding]:
    """As ``property_checks.check`` does for the other planted targets: in-process on the
    simulator, through the ``check`` command in a child process on a GPU."""
    if kind != "cuda":
        target = load_target(runner_targets.build(variant))
        [result] = run_properties(
            "runner", target, kind, settings.default.max_examples, cycles=CI_CYCLES
        )
        return failing(result.findings)
    module = tmp_path / f"planted_runner_{variant}.py"
    module.write_text(
        "from verification.planted.runner_targets import build\n"
        f"globals().update({{k: v for k, v in vars(build({variant!r})).items() "
        "if k != '__name__'})\n"
    )
    env = child_env(tmp_path)
    command = [sys.executable, "-m", "verification", "check", "runner", "--target", module.stem]
    command += ["--device", kind, "--examples", str(settings.default.max_examples)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("FINDING ")]
    return [property_finding("runner", line.split(": ")[1], line, None) for line in lines]


def test_every_eager_semantics_bug_has_its_expected_finding():
    assert set(EAGER_SEMANTICS_BUGS) == set(runner_targets.BUGS)


@pytest.mark.parametrize("bug", EAGER_SEMANTICS_BUGS)
def test_planted_eager_semantics_bug_is_found(bug, bcg_kind, tmp_path):
    findings = _check_planted_runner(bug, bcg_kind, tmp_path)
    assert findings, runner_targets.BUGS[bug][0]
    assert EAGER_SEMANTICS_BUGS[bug] in findings[0].message, findings[0].message


def test_fixed_programs_fit_the_catalog():
    for program in FIXED_PROGRAMS:
        assert len(value_metas(program, OPS)) == len(program.inputs) + len(program.steps)
