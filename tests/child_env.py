"""The environment of a child Python the tests start: this checkout first on the path, then
the given folders, then whatever path the parent ran with (the GPU machine installs the peer
packages under a folder of its own there, and a child that lost it could not import them)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child_env(*extra: str | Path, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *map(str, extra), *inherited])
    return env
