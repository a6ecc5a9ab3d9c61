"""What tests of property reproducers ask of a script: what it imports, and whether every
script's ``main()`` passes when one process runs them all (each takes seconds to start)."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from tests.child_env import child_env

ROOT = Path(__file__).resolve().parent.parent

_RUN_EACH = """
import contextlib, runpy, sys
codes = []
for path in sys.argv[1:]:
    script = runpy.run_path(path, run_name="reproducer")
    simulated = script.get("simulated_cuda", contextlib.nullcontext)
    with simulated():
        codes.append(script["main"]())
print(codes)
"""


def imports(text: str) -> set[str]:
    """The absolute module names ``text`` imports."""
    names = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def run_each_main(paths: Iterable[Path]) -> subprocess.CompletedProcess[str]:
    """One process runs every script's ``main()`` as its entry point would, printing the list
    of their exit codes last."""
    env = child_env()
    return subprocess.run(
        [sys.executable, "-c", _RUN_EACH, *map(str, paths)],
        capture_output=True, text=True, env=env, timeout=600, cwd="/",
    )  # fmt: skip
