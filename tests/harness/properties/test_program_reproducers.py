"""Reproducers of drawn-program findings stand alone: for every property that draws programs,
the script spells the program in torch calls and the property's scenario in plain code,
imports only torch and the target (and the simulator on the simulator), fails on a target
with the bug planted and passes on the library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.child_env import child_env
from tests.reproducer_scripts import imports, run_each_main
from verification.ops.spec import TensorMeta
from verification.planted.property_targets import build
from verification.programs import Program, Step
from verification.properties import PROPERTIES, engine, pool
from verification.properties.base import property_finding
from verification.properties.reproduce import render
from verification.targets import Target, load_target

ROOT = Path(__file__).resolve().parents[3]
_META = TensorMeta((64,), torch.float32)
# A catalog break op, a plain op run as a break, and a value dropped after each.
PROGRAM = Program(
    (_META, _META),
    (
        Step("exp", (0,), (), False),
        Step("sin", (2,), (), False, (2,)),
        Step("do_nothing", (3,), (), True),
        Step("neg", (3,), (), True),
        Step("mul", (4, 1), (), False, (3, 4)),
    ),
    (5,),
)
# Two segments whose temporaries die, passed to the breaks (not the pool check's witness).
TWO_SEGMENTS = Program(
    (TensorMeta((128,), torch.float32),),
    (
        Step("exp", (0,), (), False),
        Step("neg", (1,), (), False, (1,)),
        Step("do_nothing", (2,), (), True),
        Step("sin", (0,), (), True),
        Step("exp", (2,), (), False, (2,)),
        Step("mul", (4, 3), (), False, (3, 4)),
    ),
    (5,),
)
LIFETIME_ACROSS_THREADS = {"build": "X", "capture": "Y", "replays": ("X", "Y"), "reset": "X"}
# Property -> (planted bug, program, scenario, what the script must report on the bug: one of
# the texts given, as the property words it on either device; on the H200 the allocator's slack
# can absorb the repetition leak over a reproducer's cycles, which then shows as the first
# cycle's capture still alive).
CASES = {
    "pool": (
        "closures_kept_forever",
        TWO_SEGMENTS,
        {},
        "still alive after every capture and caller reference was dropped",
    ),
    "repetition": ("closures_kept_forever", PROGRAM, {}, ("grew", "left alive", "still alive")),
    # The race detector names it on the simulator, stale values on a GPU.
    "stream-order": ("unordered_side_stream", PROGRAM, {}, ("stream race", "read stale data")),
    # A capture built in one thread, captured in another and replayed from both: the
    # lifetime the script runs first, which a process-global active capture fails as well.
    "threads": (
        "thread_state_taken_at_construction",
        PROGRAM,
        {"mode": "thread_local", "at": 2, "lifetime": LIFETIME_ACROSS_THREADS},
        "built in thread X, captured in thread Y: current() in another thread returned the "
        "capture open in thread Y (asked in thread X, which built it",
    ),
    "faults": (
        "state_left_active",
        PROGRAM,
        {"point": "captured-region", "nth": 1, "illegal": "synchronize"},
        "after a fault at captured-region #1: a capture is still active",
    ),
    "nested": (
        "nested_capture_let_through",
        PROGRAM,
        {"place": "eager-step", "before_step": 2},
        "a nested capture (eager-step, before step 2)",
    ),
    "runner": ("runner_recaptures", PROGRAM, {}, "a repeated signature ran the function 2 times"),
    # A fixed scenario, not a drawn program: its script copies the runner loop itself.
    "engine": (
        "alias_cached_per_address",
        PROGRAM,
        {"fixed": "verification.properties.engine:engine_problem", "args": (engine.CANONICAL,)},
        # A stale alias hands a break another batch size's layout (or, where one matches,
        # another tensor's values, as the allocator reuses).
        ("with another shape than the capture handed it", "differ from eager"),
    ),
}


def _script(
    prop: str, target: Target, kind: str, directory: Path, case: tuple[Any, ...] | None = None
) -> Path:
    _, program, scenario, _ = case or CASES[prop]
    finding = property_finding(prop, "target-bug", "a finding", program, 0, tuple(scenario.items()))
    text = render(finding, target, kind, f"python -m verification check {prop}")
    assert text is not None
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{prop}.py"
    path.write_text(text)
    return path


def _foreign_imports(path: Path, target: Target, kind: str) -> set[str]:
    """What the script imports beyond the standard library, torch, the target's own import
    and (on the simulator) ``verification.sim``."""
    allowed = imports(target.import_code or "") | ({"verification.sim"} if kind == "sim" else set())
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    return {
        name
        for name in imports(path.read_text()) - allowed
        if name.partition(".")[0] not in stdlib | {"torch"}
    }


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = child_env()
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, timeout=600, cwd="/"
    )


def test_the_cases_cover_every_property_that_draws_programs() -> None:
    # A property added later gets a case here, or its reproducers go untested.
    assert set(CASES) == set(PROPERTIES)


def _fails_on_the_planted_bug(prop: str, case: tuple[Any, ...], kind: str, tmp_path: Path) -> None:
    variant, _, _, message = case
    target = load_target(build(variant))
    path = _script(prop, target, kind, tmp_path, case)
    assert _foreign_imports(path, target, kind) == set(), path.read_text()
    if kind == "cuda":
        assert "verification.sim" not in imports(path.read_text())
    done = _run(str(path))
    assert done.returncode == 1, done.stderr[-3000:]
    assert f"property {prop} violated: " in done.stderr, done.stderr[-3000:]
    texts = (message,) if isinstance(message, str) else message
    assert any(text in done.stderr for text in texts), done.stderr[-3000:]


@pytest.mark.parametrize("prop", sorted(CASES))
def test_a_drawn_program_reproducer_fails_on_the_planted_bug_importing_only_torch_and_it(
    prop: str, bcg_kind: str, tmp_path: Path
) -> None:
    _fails_on_the_planted_bug(prop, CASES[prop], bcg_kind, tmp_path)


@pytest.mark.sim
def test_a_nested_capture_begun_reproducer_carries_the_simulators_message(
    bcg_kind: str, tmp_path: Path
) -> None:
    # The nested property knows this bug by a message of the simulator's, which the script
    # spells as a literal. Simulator only: on a GPU the planted bug's failed graph aborts the
    # process when freed (H200, torch 2.11, bench/probes/failed_capture_begin.py).
    case = (
        "nested_capture_begun",
        PROGRAM,
        {"place": "capture", "before_step": 2},
        "was refused only by torch's capture_begin",
    )
    _fails_on_the_planted_bug("nested", case, bcg_kind, tmp_path)


def test_every_drawn_program_reproducer_passes_on_the_library(
    bcg_kind: str, tmp_path: Path
) -> None:
    target = load_target("breakable_cudagraph")
    paths = [_script(prop, target, bcg_kind, tmp_path / prop) for prop in sorted(CASES)]
    # The pool check's fixed witness is a drawn program to its reproducer too.
    witness = property_finding(pool.NAME, "target-bug", "a finding", pool.WITNESS, 0)
    text = render(witness, target, bcg_kind, "python -m verification check pool")
    assert text is not None and "WITNESS = PROGRAM" in text
    paths.append(tmp_path / "witness.py")
    paths[-1].write_text(text)
    for path in paths:
        assert _foreign_imports(path, target, bcg_kind) == set(), path.read_text()
        assert (
            imports(path.read_text()) & {"verification.programs", "verification.properties"}
            == set()
        )
    done = run_each_main(paths)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == str([0] * len(paths)), done.stderr[-3000:]
