"""How ``certify`` spends a wall-clock budget: :func:`schedule` splits ``--budget`` between the
fuzz campaign and the property checks, and says how many checks run at once.

On the simulator the phases run one after the other and the property checks share the cores,
a forked child each. On a GPU host every property check is a child process of its own (a
CUDA context survives no fork), so they all start at once, beside the fuzz campaign in this
process, and each child's budget leaves room for the seconds it spends importing torch and
opening CUDA. The planted-bug evidence runs beside them there as well, and after them on the
simulator, whose machines have few cores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from verification.devices import DeviceKind
from verification.isolation import cores

# The fuzz campaign's share of the budget where the phases run one after the other: the
# campaign draws every shape of program, each property check only its own.
FUZZ_SHARE = 0.4
# What a child on a GPU host spends before its check starts: a new interpreter importing torch
# and the harness, and a CUDA context.
CHILD_START_S = 10.0
# At least this much for each property check, whatever the budget: below it a check runs only
# its fixed scenarios.
MIN_CHECK_S = 1.0


@dataclass(frozen=True)
class Schedule:
    """``budget_s`` split: ``fuzz_s`` for the campaign, ``property_s`` for each property check,
    ``jobs`` property checks at a time, whether they (and the planted-bug evidence) run
    ``concurrent`` with the campaign, and ``workers`` for the planted-bug evidence. No budget
    (None): every check runs its example budget."""

    budget_s: float | None
    fuzz_s: float | None
    property_s: float | None
    jobs: int
    concurrent: bool
    workers: int = 1


def schedule(
    budget_s: float | None, kind: DeviceKind, checks: int, cpus: int | None = None
) -> Schedule:
    """The split of ``budget_s`` seconds over the fuzz campaign and ``checks`` property checks
    on device kind ``kind`` (``sim`` or ``cuda``), with ``cpus`` cores (default: this
    process's)."""
    cpus = cpus or cores()
    checks = max(1, checks)
    if kind == "cuda":
        # One core for the campaign in this process, the rest for the children: the property
        # checks first, the planted-bug workers on what they leave.
        jobs = max(1, min(checks, cpus - 1))
        workers = max(1, cpus - 1 - jobs)
        if budget_s is None:
            return Schedule(None, None, None, jobs, concurrent=False, workers=workers)
        rounds = math.ceil(checks / jobs)
        each = max(MIN_CHECK_S, (budget_s - rounds * CHILD_START_S) / rounds)
        return Schedule(budget_s, budget_s, each, jobs, concurrent=True, workers=workers)
    jobs = max(1, min(checks, cpus))
    if budget_s is None:
        return Schedule(None, None, None, jobs, concurrent=False, workers=cpus)
    rounds = math.ceil(checks / jobs)
    each = max(MIN_CHECK_S, (1 - FUZZ_SHARE) * budget_s / rounds)
    return Schedule(budget_s, FUZZ_SHARE * budget_s, each, jobs, concurrent=False, workers=cpus)
