"""A certificate's commit is that of the repository holding the target's files: ``-dirty`` when
they differ from it, ``untracked`` when it does not track them, unknown outside git."""

from __future__ import annotations

import shutil
import subprocess
import types
from pathlib import Path

import pytest

from verification.certify.provenance import provenance

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(where: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=where, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def _repo(where: Path, files: dict[str, str]) -> str:
    where.mkdir(parents=True)
    _git(where, "init", "-q")
    for name, text in files.items():
        (where / name).parent.mkdir(parents=True, exist_ok=True)
        (where / name).write_text(text)
    _git(where, "add", "-A")
    _git(where, "commit", "-q", "-m", "one")
    return _git(where, "rev-parse", "HEAD")


def _module(file: Path) -> types.ModuleType:
    module = types.ModuleType(file.stem)
    module.__file__ = str(file)
    return module


def _package(directory: Path) -> types.ModuleType:
    module = types.ModuleType(directory.name)
    module.__file__ = str(directory / "__init__.py")
    module.__path__ = [str(directory)]
    return module


def test_a_clean_module_is_certified_under_its_repositorys_commit(tmp_path):
    head = _repo(tmp_path / "repo", {"target.py": "x = 1\n"})
    found = provenance(_module(tmp_path / "repo" / "target.py"))
    assert (found.commit, found.dirty, found.untracked) == (head, False, False)
    assert found.describe() == head[:12]


def test_a_modified_file_makes_it_dirty_and_other_files_do_not(tmp_path):
    head = _repo(tmp_path / "repo", {"pkg/__init__.py": "", "pkg/a.py": "x = 1\n", "other.py": ""})
    (tmp_path / "repo" / "other.py").write_text("changed\n")
    (tmp_path / "repo" / "pkg" / "__pycache__").mkdir()
    (tmp_path / "repo" / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"")
    assert provenance(_package(tmp_path / "repo" / "pkg")).describe() == head[:12]
    (tmp_path / "repo" / "pkg" / "a.py").write_text("x = 2\n")
    assert provenance(_package(tmp_path / "repo" / "pkg")).describe() == f"{head[:12]}-dirty"


def test_a_new_file_in_the_target_package_makes_it_dirty(tmp_path):
    head = _repo(tmp_path / "repo", {"pkg/__init__.py": ""})
    (tmp_path / "repo" / "pkg" / "new.py").write_text("y = 1\n")
    assert provenance(_package(tmp_path / "repo" / "pkg")).describe() == f"{head[:12]}-dirty"


def test_a_copy_inside_another_repository_is_untracked_not_that_repositorys_head(tmp_path):
    outer = tmp_path / "outer"
    _repo(outer, {".gitignore": "vendored/\n"})
    copy = outer / "vendored" / "target.py"
    copy.parent.mkdir()
    copy.write_text("x = 1\n")
    found = provenance(_module(copy))
    assert found.untracked and found.repository == str(outer.resolve())
    assert found.describe() == f"untracked (not in git repository {outer.resolve()})"


def test_outside_any_repository_the_commit_is_unknown(tmp_path):
    lonely = tmp_path / "lonely" / "target.py"
    lonely.parent.mkdir()
    lonely.write_text("")
    found = provenance(_module(lonely))
    assert found.commit is None and found.describe() == "not in a git repository"
    assert provenance(types.ModuleType("builtin_like")).commit is None
