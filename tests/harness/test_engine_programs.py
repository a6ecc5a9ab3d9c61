"""Engine-shaped programs find the mistakes an engine's use of a breakable graph exposes.

Each planted engine bug (one decorated op called at several steps, host values rewritten in
place between replays, a break that returns its argument on some calls) is found by ``fuzz``
with a standalone reproducer that fails while the bug is present; whatever a target's break
returns in place of a tensor is a finding, never a traceback of the harness.
"""

from __future__ import annotations

import functools
import runpy
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.child_env import child_env
from verification.findings import TARGET_BUG
from verification.fuzz import CampaignConfig, run_campaign
from verification.planted.targets import BUGS, ENGINE_BUGS, build
from verification.report import render_reproducer
from verification.targets import load_target

ROOT = Path(__file__).resolve().parents[2]

# Seeds at which 40 examples of at most 4 steps find each bug (checked; most seeds do).
SEEDS = {
    "record_keyed_by_function": 3,
    "host_args_snapshot": 0,
    "args_rebuilt_by_pytree": 0,
    "result_copied_into_argument": 0,
}


def _run_script(path: Path) -> subprocess.CompletedProcess[str]:
    env = child_env()
    return subprocess.run(
        [sys.executable, str(path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def _fails_in_process(path: Path) -> bool:
    """Whether the reproducer script, run as ``__main__`` in this process (a child would
    import torch again), fails."""
    try:
        runpy.run_path(str(path), run_name="__main__")
    except AssertionError:
        return True
    return False


def test_every_engine_bug_has_a_budget_here():
    assert set(SEEDS) == set(ENGINE_BUGS) <= set(BUGS)


@pytest.mark.parametrize("bug", ENGINE_BUGS)
def test_fuzz_finds_engine_bug_with_a_reproducer_that_fails(bcg_kind, bug, tmp_path):
    config = CampaignConfig(
        target=load_target(build(bug)), kind=bcg_kind, examples=40, max_ops=4, seed=SEEDS[bug],
        report_dir=tmp_path, database=None,
    )  # fmt: skip
    result = run_campaign(config)
    assert result.findings, f"planted bug {bug!r} ({BUGS[bug]}) went unnoticed"
    finding = result.findings[0]
    assert finding.kind == TARGET_BUG and finding.program is not None
    assert finding.program.host, "an engine bug shrank to a program without host values"
    assert len(finding.program.steps) <= 3, finding.program
    assert _fails_in_process(result.reproducer_paths[0])
    if bug == "result_copied_into_argument":
        # The correct target refuses the break by name, which its reproducer accepts.
        clean = render_reproducer(finding, load_target(build(None)), bcg_kind, "n/a")
        path = tmp_path / "clean.py"
        path.write_text(clean)
        passing = _run_script(path)
        assert passing.returncode == 0, passing.stderr
        assert "refused the break: " in passing.stdout and "logit_bias" in passing.stdout


def _odd_returns(kind: str) -> SimpleNamespace:
    """The correct planted target, except that every break returns ``kind`` to the program
    while a capture is open."""
    base = build(None)

    def decorate(fn: Any) -> Any:
        wrapped = base.eager_break_during_capture(fn)

        @functools.wraps(fn)
        def odd(*args: Any, **kwargs: Any) -> Any:
            result = wrapped(*args, **kwargs)
            if not torch.cuda.is_current_stream_capturing():
                return result
            if kind == "none":
                return None
            if kind == "string":
                return "not a tensor"
            return torch.zeros(7, 3, device=args[0].device)

        return odd

    return SimpleNamespace(
        __name__=f"odd_returns[{kind}]",
        BreakableCUDAGraphCapture=base.BreakableCUDAGraphCapture,
        eager_break_during_capture=decorate,
        BREAK_CONTRACT="returns",
    )


@pytest.mark.parametrize("kind", ["none", "string", "other_shape"])
def test_whatever_a_break_returns_is_a_finding_not_a_harness_error(bcg_kind, kind):
    config = CampaignConfig(
        target=load_target(_odd_returns(kind)), kind=bcg_kind, examples=15, max_ops=3, database=None
    )
    result = run_campaign(config)  # raises on a harness error
    assert result.findings
    assert all(f.kind == TARGET_BUG for f in result.findings), [
        f.summary() for f in result.findings
    ]


def test_fuzz_draws_every_engine_dimension_beside_plain_programs():
    from hypothesis import HealthCheck, given, settings

    from verification.programs import Program, programs

    seen: set[str] = set()

    @settings(max_examples=300, database=None, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(programs(engine=CampaignConfig.engine, max_ops=6))
    def draw(program: Program) -> None:
        if not program.host:
            seen.add("plain")
            return
        seen.add("host")
        seen.update(f"form:{s.host}" for s in program.steps if s.host)
        shared = [(s.op, s.fn) for s in program.steps if s.fn >= 0]
        if len(shared) > len(set(shared)):
            seen.add("shared")
        seen.update(f"{s.op}:{dict(s.params)}" for s in program.steps if s.fn >= 0)
        seen.update(s.op for s in program.steps if s.fn >= 0)

    draw()
    wanted = {"plain", "host", "shared", "form:meta", "form:lens", "form:tuple", "form:dict",
              "attention:{'nested': True}", "logit_bias:{'view': False}",
              "logit_bias:{'view': True}", "rotary"}  # fmt: skip
    assert wanted <= seen, wanted - seen
