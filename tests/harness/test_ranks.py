"""Programs on two ranks (gloo processes on the simulator): each planted bug is found by the
part of ``check ranks`` / ``fuzz --ranks`` that must find it, with a reproducer that fails on
its own; clean targets pass; a rank that hangs is a finding within the bound; bad ``--ranks``
is a one-line usage error."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch

from tests.child_env import child_env
from verification.commands.cli import main
from verification.planted.rank_targets import BUGS, FOUND_BY, build
from verification.ranks import RanksConfig, draw_program, program_source, run_ranks
from verification.targets import load_target

# Rank processes run gloo on the simulator; the GPU version is bench/gpu_session.sh's
# ranks_nccl phase.
pytestmark = pytest.mark.sim


def _run(target, check: str, examples: int, parts=("programs",), report=None, **bounds):
    config = RanksConfig(
        load_target(target), examples=examples, collective_s=bounds.get("collective_s", 1.0),
        example_s=bounds.get("example_s", 10.0), parts=parts, report_dir=report, command="test",
    )  # fmt: skip
    return run_ranks(config, check)


# Each planted bug, the check that must find it, the parts of it that run, and what its
# one-line finding says.
PLANTED = {
    "rank_dependent_break": (
        "fuzz",
        ("programs",),
        "in replay 1 where rank 0 replayed all_reduce#3: break placement differs between ranks",
    ),
    "collective_captured": ("fuzz", ("programs",), "on every rank: replay does not equal eager"),
    "capture_set_rank_local": (
        "ranks",
        ("capture-sets",),
        "rows: ranks replay different captures of one capture set",
    ),
}


@pytest.mark.parametrize("bug", sorted(PLANTED))
def test_each_planted_rank_bug_is_found_by_its_check_with_a_failing_reproducer(bug, tmp_path):
    check, parts, says = PLANTED[bug]
    result = _run(build(bug), check, 1, parts, report=tmp_path)
    assert [f.violation for f in result.findings] == [FOUND_BY[bug]], result.findings
    summary = result.findings[0].summary()
    assert "\n" not in summary and says in summary
    [script] = result.reproducer_paths
    assert script.name == f"ranks_0_{FOUND_BY[bug]}.py"
    done = subprocess.run(
        [sys.executable, str(script)], env=child_env(), capture_output=True, text=True,
        timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "BUG:" in done.stdout


def test_a_rank_that_hangs_is_a_finding_within_the_bound():
    start = time.monotonic()
    result = _run(build("hang_at_replay"), "fuzz", 1, collective_s=0.5, example_s=2.0)
    assert time.monotonic() - start < 15
    assert [f.violation for f in result.findings] == ["rank-timeout"]
    assert "rank 1 did not finish within 2 s (rank 1 was in replay 1" in result.findings[0].message


@pytest.mark.parametrize("target", ["breakable_cudagraph", "verification.planted.vllm_minimal"])
def test_clean_targets_get_no_finding_on_two_ranks(target):
    result = _run(target, "ranks", 4, parts=("programs", "capture-sets"))
    assert result.findings == [] and result.examples >= 4


def test_a_capture_that_needs_its_peers_capturing_is_found_only_by_the_invalidation_part():
    target = build("capture_awaits_peers")
    assert _run(target, "ranks", 2, parts=("programs",)).findings == []
    [finding] = _run(target, "ranks", 4, parts=("invalidation",)).findings
    assert finding.violation == FOUND_BY["capture_awaits_peers"]
    assert "(capture_error_mode=thread_local, rank 0 capturing alone)" in finding.message
    assert finding.message.endswith("rank 0's capture does not survive its peers' collectives")


def test_a_capture_is_not_broken_by_a_peers_collectives_in_either_error_mode():
    result = _run("breakable_cudagraph", "ranks", 4, parts=("invalidation",))
    # One program, each rank capturing alone, in thread_local and global mode.
    assert result.findings == [] and result.examples == 4


def test_every_rank_draws_the_same_program_from_a_seed():
    assert draw_program(7, 2) == draw_program(7, 2)
    text = program_source(draw_program(7, 2))
    assert "@brk" in text and "def forward(" in text


def test_planted_rank_bugs_each_have_a_check():
    assert set(FOUND_BY) == set(BUGS)


@pytest.mark.parametrize(
    ("ranks", "says"),
    [
        ("0", "must be at least 2, got 0"),
        ("1", "must be at least 2, got 1"),
        ("two", "not an integer"),
    ],
)
def test_bad_ranks_is_a_one_line_usage_error(ranks, says, capsys):
    assert main(["fuzz", "--ranks", ranks, "--device", "sim"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and says in err and "--ranks" in err


def test_more_ranks_than_gpus_is_a_one_line_usage_error(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert main(["check", "ranks", "--ranks", "2", "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: --ranks 2 needs 2 GPUs on --device cuda; torch sees 1"


def test_fuzz_ranks_on_the_command_line_exits_0_on_a_clean_target(capsys):
    assert main(["fuzz", "--ranks", "2", "--device", "sim", "--examples", "3"]) == 0
    assert (
        capsys.readouterr()
        .out.strip()
        .splitlines()[-1]
        .startswith("fuzz --ranks: 3 examples, 0 findings")
    )
