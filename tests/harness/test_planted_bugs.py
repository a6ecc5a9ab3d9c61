"""The fuzzer finds every planted bug within the selected hypothesis profile, and passes the clean variant.

Reproducers it writes fail while the bug is present and pass on the correct target.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.child_env import child_env
from verification.findings import Finding
from verification.fuzz import CampaignConfig, run_campaign
from verification.oracle import shared_pool_of
from verification.planted import property_targets
from verification.planted.targets import BUGS, ENGINE_BUGS, build
from verification.programs import Program, Step
from verification.report import render_reproducer
from verification.targets import load_target

ROOT = Path(__file__).resolve().parents[2]


def _run_script(path: Path) -> subprocess.CompletedProcess[str]:
    env = child_env()
    return subprocess.run(
        [sys.executable, str(path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


# The engine-shaped ones, each with its budget, are in test_engine_programs.py.
@pytest.mark.parametrize("bug", [bug for bug in BUGS if bug not in ENGINE_BUGS])
def test_fuzzer_finds_planted_bug(bcg_kind, bug):
    # Under ``returns`` only the blend break nests a decorated call, so the ci profile's 25
    # examples missed this bug for seeds 0-3; seeds 0-3 found it within 52-185 examples.
    # segment_after_break_skipped: missed once in CI's 25 (its shared example database leading).
    examples = {"nested_break_recorded_twice": 400, "segment_after_break_skipped": 100}.get(bug)
    result = run_campaign(
        CampaignConfig(target=load_target(build(bug)), kind=bcg_kind, examples=examples)
    )
    assert result.findings, (
        f"planted bug {bug!r} ({BUGS[bug]}) went unnoticed in {result.examples} examples"
    )


def test_clean_planted_target_has_no_findings(bcg_kind):
    result = run_campaign(CampaignConfig(target=load_target(build(None)), kind=bcg_kind))
    assert not result.findings, result.findings[0].summary()


def test_reproducer_fails_with_the_bug_and_passes_on_the_clean_target(bcg_kind, tmp_path):
    result = run_campaign(
        CampaignConfig(load_target(build("eager_run_twice")), bcg_kind, report_dir=tmp_path)
    )
    assert result.reproducer_paths, "no reproducer written"
    failing = _run_script(result.reproducer_paths[0])
    assert failing.returncode != 0, failing.stdout
    finding: Finding = result.findings[0]
    clean = render_reproducer(finding, load_target(build(None)), bcg_kind, "n/a")
    path = tmp_path / "clean.py"
    path.write_text(clean)
    passing = _run_script(path)
    assert passing.returncode == 0, passing.stderr
    assert "reproducer passed" in passing.stdout


def test_a_bug_only_a_capture_set_shows_is_found_and_its_reproducer_replays_the_set(
    bcg_kind, tmp_path
):
    # Each replay runs the newest capture's eager steps: right for a program captured once,
    # wrong for every older capture of a set sharing a pool.
    target = load_target(property_targets.build("replays_last_capture"))
    result = run_campaign(CampaignConfig(target, bcg_kind, report_dir=tmp_path, database=None))
    found = [(f, path) for f, path in zip(result.findings, result.reproducer_paths)]
    assert found and all(shared_pool_of(f) is not None for f, _ in found), [
        f.summary() for f, _ in found
    ]
    finding, path = found[0]
    assert f"with {shared_pool_of(finding).captures} captures" in finding.message
    failing = _run_script(path)
    assert failing.returncode != 0, failing.stdout
    clean = render_reproducer(finding, load_target(property_targets.build(None)), bcg_kind, "n/a")
    (tmp_path / "clean.py").write_text(clean)
    passing = _run_script(tmp_path / "clean.py")
    assert passing.returncode == 0, passing.stderr
    assert "reproducer passed" in passing.stdout


def test_shrunk_finding_is_a_handful_of_steps(bcg_kind):
    result = run_campaign(
        CampaignConfig(target=load_target(build("eager_run_twice")), kind=bcg_kind, max_ops=12)
    )
    program: Program = result.findings[0].program
    assert len(program.steps) <= 3, program
    assert all(isinstance(s, Step) for s in program.steps)
