"""Runs one property check for a test, on the suite's device, within the hypothesis profile.

In-process on the simulator. On a GPU a planted target runs through the ``check`` command in
a child process, since its bug may leave a stream capturing for the rest of the process.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

from hypothesis import settings

from tests.child_env import child_env
from verification import bounds
from verification.findings import Finding
from verification.properties.base import CheckResult, property_finding
from verification.properties.processes import run_properties
from verification.targets import load_target

ROOT = Path(__file__).resolve().parent.parent
CI_CYCLES = 30


def _in_child(prop: str, variant: str, kind: str, tmp_path: Path, planted: str) -> list[Finding]:
    module = tmp_path / f"planted_{variant}.py"
    module.write_text(
        f"from verification.planted.{planted} import build\n"
        f"globals().update({{k: v for k, v in vars(build({variant!r})).items() if k != '__name__'}})\n"
    )
    env = child_env(tmp_path)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "verification",
            "check",
            prop,
            "--target",
            module.stem,
            "--device",
            kind,
            "--examples",
            str(settings.default.max_examples),
            "--cycles",
            str(CI_CYCLES),
            # The bound the test set (verification.bounds.limit), in the child too.
            "--hang-seconds",
            f"{bounds.current():g}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("FINDING ")]
    # Exit 1 (a bug) or 3 (a harness error) with no FINDING line, or any status the command
    # does not give, is a child that did not finish its check: never "nothing found".
    if done.returncode not in (0, 1, 3) or (done.returncode != 0 and not lines):
        raise AssertionError(
            f"check {prop} on {variant} exited {done.returncode} with {len(lines)} FINDING "
            f"lines\nstdout (end): {done.stdout[-2000:]}\nstderr (end): {done.stderr[-2000:]}"
        )
    return [property_finding(prop, line.split(": ")[1], line, None) for line in lines]


def check(
    prop: str,
    variant: str | None,
    kind: str,
    tmp_path: Path,
    *,
    first: bool = False,
    planted: str = "property_targets",
) -> list[Finding]:
    """The findings of ``prop`` on the library (``variant`` None) or a planted copy of the
    module ``planted`` of :mod:`verification.planted` (``duty_targets``: its clean target for
    ``variant`` None); with ``first``, on the simulator, the check stops at its first failing
    finding, unshrunk (on a GPU the child process runs the whole check, whose findings include
    that one)."""
    if variant is not None and kind == "cuda":
        return _in_child(prop, variant, kind, tmp_path, planted)
    build = importlib.import_module(f"verification.planted.{planted}").build
    if variant is None and planted == "property_targets":
        target = load_target("breakable_cudagraph")
    else:
        target = load_target(build(variant))
    results: list[CheckResult] = run_properties(
        prop, target, kind, settings.default.max_examples, cycles=CI_CYCLES, verdict_only=first
    )
    return results[0].findings


def failing(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.fails]
