"""The commands run against each mutant, as data: the harness, plus an optional unit-test run.

A stage kills a mutant when it exits non-zero or runs past its timeout. ``HARNESS_STAGES`` is
the harness itself; a stage whose ``needs_module`` is not importable at run time is left out,
so a new harness command (``check all`` from ``verification.properties``) is one more line.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    """One command; ``argv`` items are ``str.format`` templates over the run's settings."""

    name: str
    argv: tuple[str, ...]
    needs_module: str | None = None

    def command(self, **settings: object) -> list[str]:
        return [part.format(**settings) for part in self.argv]


HARNESS_STAGES: tuple[Stage, ...] = (
    Stage(
        "fuzz",
        tuple(
            "{python} -m verification fuzz --target {target} --device {device} "
            "--examples {examples} --max-ops 12 --seed {seed} --no-isolate".split()
        ),
    ),
    Stage(
        "check all",
        tuple(
            "{python} -m verification check all --target {target} --device {device} "
            "--seed {seed} --no-isolate".split()
        ),
        needs_module="verification.properties",
    ),
)


def _available(stage: Stage) -> bool:
    if stage.needs_module is None:
        return True
    try:
        return importlib.util.find_spec(stage.needs_module) is not None
    except ImportError:
        return False


def build_stages(unit_tests: str | None, harness: bool = True) -> list[Stage]:
    """The stages in the order they run: the unit-test shell command first (it is the fast
    filter), then every available harness stage."""
    stages = [Stage("unit tests", ("/bin/sh", "-c", unit_tests))] if unit_tests else []
    if harness:
        stages += [s for s in HARNESS_STAGES if _available(s)]
    return stages


PYTHON = sys.executable
