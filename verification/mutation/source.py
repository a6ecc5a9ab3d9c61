"""Finds a target's source files and copies its top-level package to a scratch directory.

Mutants are only ever written into such a copy: the installed or checked-out target is never
touched. ``TargetSource`` says which files of the copy are mutated (the target module's own
file, or every ``.py`` file of its package) and which directory goes first on ``PYTHONPATH``.
"""

from __future__ import annotations

import importlib
import importlib.util
import shutil
from dataclasses import dataclass
from pathlib import Path

from verification.errors import UsageError

_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")


@dataclass(frozen=True)
class TargetSource:
    """Where the target's source lives: ``root`` is the directory on ``sys.path`` that holds
    ``top`` (its top-level package or module); ``files`` are the mutated files, relative to
    ``root``."""

    name: str
    root: Path
    top: str
    files: tuple[Path, ...]

    def copy_to(self, scratch: Path) -> Path:
        """Copies the top-level package into ``scratch``; returns the new root."""
        scratch.mkdir(parents=True, exist_ok=True)
        origin = self.root / self.top
        if origin.is_dir():
            shutil.copytree(origin, scratch / self.top, ignore=_IGNORED, dirs_exist_ok=True)
        else:
            shutil.copy2(origin, scratch / self.top)
        return scratch


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or "no message"
    return f"{type(error).__name__}: {text}"


def find_source(name: str) -> TargetSource:
    """Locates ``name``'s Python source; a usage error if it does not import or has none."""
    try:
        spec = importlib.util.find_spec(name)
    except Exception as error:  # a parent package that raises on import raises anything
        raise UsageError(
            f"target module {name!r} cannot be imported ({_one_line(error)})"
        ) from None
    if spec is None:
        raise UsageError(f"target module {name!r} cannot be imported; install it or fix --target")
    origin = Path(spec.origin) if spec.origin and spec.has_location else None
    if origin is None or origin.suffix != ".py" or not origin.is_file():
        raise UsageError(
            f"target module {name!r} has no Python source to mutate (found {spec.origin!r})"
        )
    try:  # found is not enough: every mutant would "die" of the target's own import error
        importlib.import_module(name)
    except (Exception, SystemExit) as error:
        raise UsageError(
            f"target module {name!r} cannot be imported ({_one_line(error)})"
        ) from None
    depth = name.count(".") + (1 if spec.submodule_search_locations is not None else 0)
    root = origin.parents[depth]
    top_path = origin.relative_to(root).parts[0]
    if spec.submodule_search_locations is not None:
        files = tuple(sorted(p.relative_to(root) for p in origin.parent.rglob("*.py")))
    else:
        files = (origin.relative_to(root),)
    return TargetSource(name=name, root=root, top=top_path, files=files)
