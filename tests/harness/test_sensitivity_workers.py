"""The planted-bug evidence of certify: its workers, what a dead worker counts, its cache, and
how certify's time budget is split."""

from __future__ import annotations

import sys

import pytest

from verification.certify import sensitivity
from verification.certify.run import CertifyRun
from verification.certify.schedule import CHILD_START_S, FUZZ_SHARE, schedule
from verification.fuzz import CampaignConfig
from verification.targets import load_target

ABORTING = """
import os, signal
from verification.planted.targets import build as _build
BUGS = {'aborts': 'the process dies by SIGABRT', 'eager_run_twice': 'real', 'no_bug': 'clean'}
def build(bug):
    if bug == 'aborts':
        os.kill(os.getpid(), signal.SIGABRT)
    return _build(None if bug == 'no_bug' else bug)
"""


@pytest.fixture
def aborting_planted(tmp_path, monkeypatch):
    (tmp_path / "aborting_planted.py").write_text(ABORTING)
    (tmp_path / "no_more_planted.py").write_text("BUGS = {}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sensitivity, "FUZZ_MODULES", ("aborting_planted",))
    monkeypatch.setattr(sensitivity, "PROPERTY_MODULE", "no_more_planted")
    monkeypatch.setattr(sensitivity, "DUTY_MODULE", "no_more_planted")
    monkeypatch.setattr(sensitivity, "RUNNER_MODULE", "no_more_planted")
    monkeypatch.setattr(sensitivity, "FUZZ_EXAMPLES", 10)
    monkeypatch.setenv("BCG_CACHE_DIR", str(tmp_path / "cache"))
    yield
    for name in ("aborting_planted", "no_more_planted"):
        sys.modules.pop(name, None)


# The planted modules exist only in this process, which the simulator's workers fork.
@pytest.mark.sim
def test_a_worker_killed_by_a_signal_counts_its_target_found_and_the_rest_still_run(
    bcg_kind, aborting_planted
):
    measured = sensitivity.measure(bcg_kind, workers=1)
    found = {row["name"]: row["found"] for row in measured["targets"]}
    assert found == {
        "aborting_planted:aborts": True,
        "aborting_planted:eager_run_twice": True,
        "aborting_planted:no_bug": False,
    }
    dead = next(r for r in measured["targets"] if r["name"] == "aborting_planted:aborts")
    assert "status -6" in dead["ended"]
    assert measured["source"] == "fresh" and measured["measured_at"]


@pytest.mark.sim
def test_cached_evidence_is_reused_and_says_when_it_was_measured_and_fresh_measures_again(
    bcg_kind, aborting_planted, monkeypatch
):
    target = load_target("breakable_cudagraph")
    run = CertifyRun(CampaignConfig(target=target, kind=bcg_kind))
    run.sensitivity = "cached"
    first = sensitivity.sensitivity_check(run).section
    assert first is not None and first["source"] == "fresh"
    assert sensitivity.cache_path(bcg_kind, 0).exists()

    def no_measuring(*args, **kwargs):
        raise AssertionError("measured again although the evidence was cached")

    monkeypatch.setattr(sensitivity, "measure", no_measuring)
    again = sensitivity.sensitivity_check(run).section
    assert again is not None and again["source"] == "cached"
    assert again["measured_at"] == first["measured_at"]
    assert "cached, measured " + first["measured_at"] in sensitivity.summary_line(again)
    run.sensitivity = "fresh"
    with pytest.raises(AssertionError, match="measured again"):
        sensitivity.sensitivity_check(run)


def test_the_cache_key_changes_with_the_planted_set(aborting_planted, monkeypatch):
    before = sensitivity.cache_path("sim", 0)
    monkeypatch.setattr(sensitivity, "RUNNER_MODULE", "verification.planted.runner_targets")
    assert sensitivity.cache_path("sim", 0) != before
    assert sensitivity.cache_path("sim", 1) != before


def test_the_budget_is_split_over_fuzz_and_the_checks_by_device():
    sim = schedule(40.0, "sim", checks=7, cpus=2)
    assert sim.fuzz_s == pytest.approx(FUZZ_SHARE * 40)
    # Four rounds of two checks share what fuzz leaves.
    assert sim.property_s == pytest.approx((1 - FUZZ_SHARE) * 40 / 4)
    assert (sim.jobs, sim.concurrent, sim.workers) == (2, False, 2)
    gpu = schedule(40.0, "cuda", checks=7, cpus=16)
    # All at once beside fuzz, each leaving room for its child's start.
    assert (gpu.fuzz_s, gpu.property_s) == (40.0, 40.0 - CHILD_START_S)
    assert (gpu.jobs, gpu.concurrent, gpu.workers) == (7, True, 8)
    unbudgeted = schedule(None, "sim", checks=7, cpus=2)
    assert (unbudgeted.fuzz_s, unbudgeted.property_s) == (None, None)


def test_a_budget_is_seconds_or_none_and_nothing_else():
    import argparse
    import math

    from verification.commands.options import budget_seconds

    assert budget_seconds("12.5") == 12.5 and budget_seconds("none") == math.inf
    for bad in ("0", "-3", "abc", "inf"):
        with pytest.raises(argparse.ArgumentTypeError):
            budget_seconds(bad)
