"""Property 6, memory under repetition: cycles of capture, replay and reset stay flat.

One drawn program is captured as a drawn capture set (:mod:`.capture_set`: several batch
sizes into one pool, replayed in any order, some dropped and captured again), replayed and
reset ``cycles`` times (10,000 under the thorough profile, a few hundred in CI), each cycle
on fresh static inputs and into a fresh pool, as a server re-capturing would. After the
warm-up cycles neither reserved nor allocated memory may grow, the live CUDA graph objects
must not pile up, and the first cycle's capture and inputs must die: no pinned pool, no
leaked graph. The first and last cycles' replays must equal eager.
"""

from __future__ import annotations

import gc
import warnings
import weakref
from typing import Any

import torch
from hypothesis import strategies as st

from verification.causes import KEPT_ALIVE, Problem, within
from verification.findings import Finding
from verification.programs import Program
from verification.properties.base import (
    CheckConfig,
    CheckResult,
    Findings,
    program_strategy,
    property_finding,
    timed,
)
from verification.properties.capture_set import (
    CapturedSet,
    CaptureSet,
    capture_sets,
    from_data,
)
from verification.properties.runs import capture_streams, reserved, settle

NAME = "repetition"
WARM_UP = 3


def _live_graphs() -> int:
    # isinstance on every live object trips deprecation warnings of lazily loaded modules.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sum(isinstance(o, torch.cuda.CUDAGraph) for o in gc.get_objects())


def _cycle(
    program: Program, capture_set: CaptureSet, config: CheckConfig, check_replay: bool
) -> tuple[str | None, list]:
    captured = CapturedSet(program, capture_set, config)
    problem = captured.replays(check=check_replay)
    refs = [weakref.ref(buffer) for buffer in captured.buffers]
    refs += [weakref.ref(run.capture) for run in captured.each_run()]
    captured.drop()
    return problem, refs


def repetition_problem(
    program: Program, config: CheckConfig, capture_set: CaptureSet | None = None
) -> str | None:
    capture_set = capture_set or CaptureSet()
    cycles = max(config.cycles, WARM_UP + 1)
    first_refs: list = []
    for cycle in range(WARM_UP):
        problem, refs = _cycle(program, capture_set, config, check_replay=cycle == 0)
        if problem is not None:
            return within(f"cycle {cycle}: ", problem)
        first_refs = first_refs or refs
    settle(config.kind)
    base_graphs = _live_graphs()
    # Reserved memory grows by whole segments (2 MiB for small blocks), so a small leak
    # shows first in the allocated bytes.
    base = {"reserved": reserved(), "allocated": torch.cuda.memory_allocated()}
    for cycle in range(WARM_UP, cycles):
        problem, _ = _cycle(program, capture_set, config, check_replay=cycle == cycles - 1)
        if problem is not None:
            return within(f"cycle {cycle}: ", problem)
    settle(config.kind)
    now = {"reserved": reserved(), "allocated": torch.cuda.memory_allocated()}
    for kind, before in base.items():
        grown = now[kind] - before
        if grown > 0:  # what each cycle made outlives its reset: a leak, as a capture kept alive
            return Problem(
                f"{kind} memory grew by {grown} bytes over {cycles - WARM_UP} cycles of "
                f"capture, replay and reset ({grown / (cycles - WARM_UP):.0f} bytes per cycle)",
                KEPT_ALIVE,
            )
    graphs = _live_graphs() - base_graphs
    if graphs > 0:
        return Problem(
            f"{graphs} CUDA graphs were left alive by {cycles - WARM_UP} cycles", KEPT_ALIVE
        )
    if any(ref() is not None for ref in first_refs):
        return Problem(
            "the first cycle's capture or its static inputs are still alive after reset",
            KEPT_ALIVE,
        )
    return None


def example(program: Program, scenario: dict[str, Any], config: CheckConfig) -> str | None:
    """Re-checks one finding's program (a reproducer calls this)."""
    return repetition_problem(program, config, from_data(scenario.get("capture_set")))


def check(config: CheckConfig) -> CheckResult:
    def run() -> tuple[int, list[Finding]]:
        found = Findings(NAME, config)

        def body(drawn: tuple[Program, CaptureSet]) -> Finding | None:
            program, capture_set = drawn
            problem = repetition_problem(program, config, capture_set)
            if problem is None:
                return None
            scenario = (("capture_set", capture_set.as_data()),)
            return property_finding(NAME, "target-bug", problem, program, config.seed, scenario)

        programs = program_strategy(config).filter(lambda p: p.num_breaks > 0)
        # Two sizes show a set's leak; a third would triple every cycle's cost.
        strategy = st.tuples(programs, capture_sets(2, capture_streams(config.target)))
        # One long run is the point; a few programs cover different break layouts, or as many
        # as a time budget allows.
        cap = config.examples // 10 if config.seconds is not None else min(3, config.examples // 10)
        found.search(strategy, body, max(1, cap))
        return found.result()

    return timed(NAME, run)
