"""Where a target's code comes from, for a certificate: the commit of the git repository that
holds the target's own files, ``-dirty`` when those files differ from that commit, and
``untracked`` when that repository does not track them (a copy git ignores inside another
checkout is not certified under that checkout's HEAD). Without git or a repository: unknown.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_GIT_TIMEOUT_S = 10
# Bytecode caches sit beside the sources and are ignored by every sane .gitignore.
_NOT_SOURCE = ("__pycache__/", ".pyc")


@dataclass(frozen=True)
class Provenance:
    """``commit`` is None when the files are in no git repository (or git is unavailable)."""

    commit: str | None
    dirty: bool = False
    untracked: bool = False
    repository: str | None = None

    def describe(self) -> str:
        """One phrase for a certificate's heading."""
        if self.repository is None:
            return "not in a git repository"
        if self.untracked:
            return f"untracked (not in git repository {self.repository})"
        if self.commit is None:
            return f"no commit yet in {self.repository}"
        return f"{self.commit[:12]}{'-dirty' if self.dirty else ''}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "commit": self.commit,
            "dirty": self.dirty,
            "untracked": self.untracked,
            "repository": self.repository,
            "describe": self.describe(),
        }


def _git(cwd: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=_GIT_TIMEOUT_S
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def target_path(module: Any) -> Path | None:
    """The target's files: its package directory, or its module file."""
    locations = getattr(module, "__path__", None)
    if locations:
        return Path(next(iter(locations))).resolve()
    file = getattr(module, "__file__", None)
    return Path(file).resolve() if file else None


def provenance(module: Any) -> Provenance:
    path = target_path(module)
    if path is None:
        return Provenance(commit=None)
    where = path if path.is_dir() else path.parent
    top = _git(where, "rev-parse", "--show-toplevel")
    if top is None:
        return Provenance(commit=None)
    repository = top.strip()
    head = _git(where, "rev-parse", "--verify", "--quiet", "HEAD")
    commit = head.strip() if head else None
    tracked = _git(where, "ls-files", "--", str(path))
    if not tracked:
        return Provenance(commit=commit, untracked=True, repository=repository)
    status = _git(where, "status", "--porcelain", "--untracked-files=all", "--", str(path)) or ""
    changed = [
        line for line in status.splitlines() if line and not line.rstrip().endswith(_NOT_SOURCE)
    ]
    return Provenance(commit=commit, dirty=bool(changed), repository=repository)
