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


def run_each_main(
    paths: Iterable[Path], *, separately: bool = False
) -> subprocess.CompletedProcess[str]:
    """One process runs every script's ``main()`` as its entry point would, printing the list
    of their exit codes last; ``separately``, a process per script (on a GPU a script whose
    bug invalidates a capture can leave the process's CUDA state unusable for the next)."""
    env = child_env()
    runs = [[*map(str, paths)]] if not separately else [[str(p)] for p in paths]
    done = [
        subprocess.run(
            [sys.executable, "-c", _RUN_EACH, *scripts],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
            cwd="/",
        )
        for scripts in runs
    ]
    if len(done) == 1:
        return done[0]
    codes = []
    for run in done:
        said = run.stdout.strip().splitlines()
        codes.extend(ast.literal_eval(said[-1]) if said else [f"rc={run.returncode}"])
    return subprocess.CompletedProcess(
        done[0].args,
        max(run.returncode for run in done),
        "".join(run.stdout for run in done) + f"{codes}\n",
        "".join(run.stderr for run in done),
    )
