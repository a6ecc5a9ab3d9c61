"""Reproducers of fixed-scenario findings stand alone: they import only torch and the target (and
the simulator on the simulator), fail on the buggy target and pass on the library."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

from tests.child_env import child_env
from tests.reproducer_scripts import imports, run_each_main
from verification.planted.check_targets import build
from verification.planted.property_targets import build as build_property_target
from verification.properties import faults, nested, pool, runner, threads
from verification.properties.base import property_finding, scenario_of
from verification.properties.reproduce import render
from verification.targets import load_target

ROOT = Path(__file__).resolve().parents[3]
FIXED = {
    "pool-placement": pool.pool_placement_problem,
    "returned-memory": pool.returned_memory_problem,
    "arguments": pool.arguments_as_given_problem,
    "views": pool.views_as_given_problem,
    **{name: functools.partial(pool.container_as_given_problem, name) for name in pool.CONTAINERS},
    "warning": faults.warning_problem,
    "caught-break": faults.caught_break_problem,
    "collector": faults.collector_problem,
    "collector-kept-off": faults.collector_kept_off_problem,
    "decorator-identity": nested._decorator_identity_problem,
    "nested-decorated": nested._nested_decorated_problem,
    "foreign-add-eager": threads.foreign_add_eager_problem,
    "runner-arguments": runner.arguments_problem,
    "runner-debug": runner.debug_problem,
}


def _script(problem, target, kind: str, tmp_path: Path) -> Path:
    finding = property_finding("pool", "target-bug", "a finding", scenario=scenario_of(problem))
    text = render(finding, target, kind, "python -m verification check pool")
    assert text is not None
    path = tmp_path / "reproducer.py"
    path.write_text(text)
    return path


def _run(path: Path) -> subprocess.CompletedProcess[str]:
    env = child_env()
    return subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=300
    )


def _imported(path: Path) -> set[str]:
    return {
        name.partition(".")[0] for name in imports(path.read_text()) if name != "verification.sim"
    }


def test_every_fixed_scenario_reproducer_passes_on_the_library_importing_only_torch_and_it(
    bcg_kind, tmp_path
):
    paths = []
    for number, problem in enumerate(FIXED.values()):
        (tmp_path / str(number)).mkdir()
        paths.append(
            _script(problem, load_target("breakable_cudagraph"), bcg_kind, tmp_path / str(number))
        )
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for path in paths:
        assert _imported(path) - stdlib == {"torch", "breakable_cudagraph"}, path.read_text()
    done = run_each_main(paths)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == str([0] * len(FIXED)), done.stderr[-3000:]


def test_a_container_reproducer_fails_on_a_target_that_loses_the_type(bcg_kind, tmp_path):
    problem = functools.partial(pool.container_as_given_problem, "namedtuple")
    path = _script(problem, load_target(build("namedtuple_rebuilt_plain")), bcg_kind, tmp_path)
    done = _run(path)
    assert (
        done.returncode == 1
        and "reached it at replay as tuple, not as namedtuple Pair" in done.stderr
    )


def test_a_same_start_views_reproducer_fails_on_a_target_that_keys_aliases_by_address(
    bcg_kind, tmp_path
):
    target = load_target(build_property_target("alias_cached_per_address"))
    done = _run(_script(pool.views_as_given_problem, target, bcg_kind, tmp_path))
    assert done.returncode == 1 and "its transpose" in done.stderr, done.stderr[-2000:]
