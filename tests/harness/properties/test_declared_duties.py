"""Duties declared one by one: a target names the caller duties it fulfils itself (``GUARDS``),
the harness fulfils only the rest for it and checks the declared ones as any other behaviour.
A target that pauses the collector and lets threads capture side by side, but relies on its
caller for a side stream, passes clean; a bug in either guard is found by the check that must
find it, with a standalone reproducer that fails on the bug and passes on the correct target."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.child_env import child_env
from tests.property_checks import check, failing
from tests.reproducer_scripts import run_each_main
from verification.errors import UsageError
from verification.ops.spec import TensorMeta
from verification.planted import duty_targets
from verification.programs import Program, Step
from verification.properties import faults
from verification.properties.base import property_finding, scenario_of
from verification.properties.reproduce import render
from verification.properties.runs import capture_streams
from verification.targets import load_target
from verification.targets.contracts import COLLECTOR, ONE_CAPTURING_THREAD, SIDE_STREAM

ROOT = Path(__file__).resolve().parents[3]
# Each planted bug: what its check's finding says.
FOUND_AS = {
    "collector_frozen_only": "freed by the cyclic collector while a capture was open",
    "collector_enabled_on_exit": "where its caller had turned it off before the capture opened",
    "device_synced_per_segment": "the capture in thread A raised",
}
_META = TensorMeta((64,), torch.float32)
# Two segments around a break that returns nothing (and so defines no value: the target's
# contract is out-buffer), for
# the threads reproducer's two capturing threads.
PROGRAM = Program(
    (_META, _META),
    (
        Step("exp", (0,), (), False),
        Step("do_nothing", (2,), (), True),
        Step("mul", (2, 1), (), False),
    ),
    (3,),
)
# Each planted bug's scenario, as its check's finding carries it to the reproducer.
SCENARIOS = {
    "collector_frozen_only": (None, scenario_of(faults.collector_problem)),
    "collector_enabled_on_exit": (None, scenario_of(faults.collector_kept_off_problem)),
    "device_synced_per_segment": (PROGRAM, (("mode", "thread_local"), ("at", 1))),
}


def test_a_target_gets_from_the_harness_only_the_duties_it_does_not_declare():
    assert load_target(duty_targets.build()).caller_duties == (SIDE_STREAM,)
    assert load_target("verification.planted.duty_targets").caller_duties == (SIDE_STREAM,)
    every = (COLLECTOR, ONE_CAPTURING_THREAD, SIDE_STREAM)
    undeclared = SimpleNamespace(**{**vars(duty_targets.build()), "GUARDS": ()})
    assert load_target(undeclared).caller_duties == every
    shorthand = SimpleNamespace(**{**vars(undeclared), "GUARDS_ITSELF": True})
    assert load_target(shorthand).caller_duties == ()
    one = SimpleNamespace(**{**vars(undeclared), "GUARDS": COLLECTOR})  # a bare name is one
    assert load_target(one).caller_duties == (ONE_CAPTURING_THREAD, SIDE_STREAM)
    # The harness still captures from a side stream for it, never from the default stream.
    assert "default" not in capture_streams(load_target(duty_targets.build()))


def test_an_unknown_duty_is_refused_as_the_target_loads():
    wrong = SimpleNamespace(**{**vars(duty_targets.build()), "GUARDS": ("side_stream",)})
    with pytest.raises(UsageError, match="unknown caller duty 'side_stream'; the duties are "):
        load_target(wrong)


def test_an_unknown_duty_on_the_command_line_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "misdeclared.py").write_text(
        "from verification.planted.duty_targets import *\nGUARDS = ('collector', 'gc')\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "verification", "check", "faults", "--target", "misdeclared",
         "--device", "sim"],
        cwd=ROOT, env=child_env(tmp_path), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        "error: target 'misdeclared' declares GUARDS with an unknown caller duty 'gc'; the "
        "duties are collector, one-capturing-thread, side-stream"
    ]


@pytest.mark.parametrize("prop", ["faults", "threads", "stream-order"])
def test_the_target_guarding_the_duties_it_declares_passes_the_checks_of_those_duties(
    bcg_kind, tmp_path, prop
):
    assert not failing(check(prop, None, bcg_kind, tmp_path, planted="duty_targets"))


@pytest.mark.parametrize("bug", list(duty_targets.BUGS))
def test_a_bug_in_a_declared_duty_is_found_by_its_check(bcg_kind, tmp_path, bug):
    description, prop = duty_targets.BUGS[bug]
    found = failing(check(prop, bug, bcg_kind, tmp_path, first=True, planted="duty_targets"))
    assert found and FOUND_AS[bug] in found[0].message, (description, found)


def test_each_declared_duty_bug_reproducer_fails_on_it_and_passes_on_the_correct_target(
    bcg_kind, tmp_path
):
    paths = []
    for bug, (program, scenario) in SCENARIOS.items():
        prop = duty_targets.BUGS[bug][1]
        finding = property_finding(prop, "target-bug", "a finding", program, 0, scenario)
        for variant in (bug, None):
            target = load_target(duty_targets.build(variant))
            text = render(finding, target, bcg_kind, f"python -m verification check {prop}")
            assert text is not None
            paths.append(tmp_path / f"{bug}_{variant or 'correct'}.py")
            paths[-1].write_text(text)
    done = run_each_main(paths, separately=bcg_kind == "cuda")
    said = done.stdout.strip().splitlines()
    assert said and said[-1] == str([1, 0] * len(SCENARIOS)), done.stderr[-3000:]
    for text in FOUND_AS.values():
        assert text in done.stderr, done.stderr[-3000:]
