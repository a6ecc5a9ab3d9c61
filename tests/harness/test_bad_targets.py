"""A ``--target`` that cannot be imported (an empty name, a module that raises at import, one
with a syntax error, one whose dependency is missing) is a usage error under every command that
takes one: one ``error:`` line, exit 2, no traceback, and nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.child_env import child_env

ROOT = Path(__file__).resolve().parents[2]

BAD_TARGETS = {
    "": "error: the target module name is empty",
    "raising_target": "error: target module 'raising_target' cannot be imported: it raised "
    "RuntimeError: broken at import",
    "syntax_target": "error: target module 'syntax_target' cannot be imported: syntax error at ",
    "needs_missing_dep": "error: target module 'needs_missing_dep' cannot be imported: "
    "No module named 'no_such_dependency_of_the_target'",
}
# Each command with the arguments that make it otherwise valid; every one takes --out or
# --report, pointed at a directory that must not be created.
COMMANDS = {
    "fuzz": ["--report", "{out}"],
    "check": ["all", "--report", "{out}"],
    "fuzz-op": ["tests.faulty_ops:CLEAN", "--report", "{out}"],
    "certify": ["--out", "{out}", "--profile", "quick"],
}


@pytest.fixture(scope="module")
def bad_modules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("bad_targets")
    (where / "raising_target.py").write_text("raise RuntimeError('broken\\nat import')\n")
    (where / "syntax_target.py").write_text("def broken(:\n    pass\n")
    (where / "needs_missing_dep.py").write_text("import no_such_dependency_of_the_target\n")
    return where


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("target", BAD_TARGETS)
def test_a_target_that_cannot_be_imported_is_one_line_and_exit_2(
    command: str, target: str, bad_modules: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    args = [a.format(out=out) for a in COMMANDS[command]]
    env = child_env(bad_modules)
    done = subprocess.run(
        [sys.executable, "-m", "verification", command, "--target", target, "--device", "sim",
         *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(BAD_TARGETS[target]), done.stderr
    assert done.stdout == ""
    assert not out.exists()
