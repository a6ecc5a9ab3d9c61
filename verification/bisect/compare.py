"""Where one step's replay first differs from its eager run, at the granularity of breaks.

:func:`first_difference` walks the breaks in order (their tensor arguments, their non-tensor
arguments, what they wrote and returned), then the forward's outputs, and returns the first
:class:`Difference`: the segment or break to narrow down and the tensor that shows it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from verification import divergence
from verification.bisect.trace import Trace


@dataclass(frozen=True)
class Tolerance:
    rtol: float = 1e-5
    atol: float = 1e-6


def differs(a: torch.Tensor, b: torch.Tensor, tol: Tolerance) -> bool:
    return divergence.differs(a, b, tol.rtol, tol.atol)


def first_diff(eager: list[torch.Tensor], replay: list[torch.Tensor], tol: Tolerance) -> int | None:
    """Index of the first differing tensor; ``len`` when only the counts differ."""
    for i, (a, b) in enumerate(zip(eager, replay)):
        if differs(a, b, tol):
            return i
    return None if len(eager) == len(replay) else min(len(eager), len(replay))


def describe(t: torch.Tensor | None, other: torch.Tensor | None = None) -> str:
    """A tensor and, given the other run's, where they first differ (torch's isclose)."""
    return divergence.describe(t, other, rtol=1e-5, atol=1e-8)


def _read_difference(
    eager: list[torch.Tensor], replay: list[torch.Tensor], after: list[torch.Tensor], tol: Tolerance
) -> int | None:
    """The first differing argument the break did not overwrite eagerly: one it writes may hold
    anything going in (an in-place update that reads it too is then judged by its result)."""
    for i, (a, b) in enumerate(zip(eager, replay)):
        if differs(a, b, tol) and i < len(after) and not differs(a, after[i], tol):
            return i
    return None


@dataclass(frozen=True)
class Difference:
    """``kind``: ``segment`` (the graph ops before break ``index``, or after the last one),
    ``break`` (the break's own body), ``break-host-args`` or ``break-count``."""

    kind: str
    index: int
    tensor: str


def first_difference(
    eager: Trace,
    eager_out: list[torch.Tensor],
    replay: Trace,
    replay_out: list[torch.Tensor],
    tol: Tolerance,
) -> Difference | None:
    if len(eager.breaks) != len(replay.breaks):
        return Difference(
            "break-count",
            min(len(eager.breaks), len(replay.breaks)),
            f"eager called {len(eager.breaks)} breaks, the replay {len(replay.breaks)}",
        )
    for k, (e, r) in enumerate(zip(eager.breaks, replay.breaks)):
        mine, theirs = e.after + e.result, r.after + r.result
        changed = first_diff(mine, theirs, tol)
        if changed is None:
            # An argument that differs only going in was overwritten or unused: an out
            # buffer holds the previous step's values eagerly and the capture's at replay.
            continue
        read = _read_difference(e.inputs, r.inputs, e.after, tol)
        if read is not None:
            a, b = e.inputs[read], r.inputs[read]
            return Difference(
                "segment", k, f"tensor argument {read} of break {e.name}: {describe(a, b)}"
            )
        if e.host_args != r.host_args:
            return Difference(
                "break-host-args",
                k,
                f"non-tensor arguments of break {e.name}: eager {e.host_args}, replay {r.host_args}",
            )
        what = "argument it wrote" if changed < len(e.after) else "result"
        a = mine[changed] if changed < len(mine) else None
        b = theirs[changed] if changed < len(theirs) else None
        return Difference("break", k, f"{what} of break {e.name}: {describe(a, b)}")
    i = first_diff(eager_out, replay_out, tol)
    if i is not None:
        a = eager_out[i] if i < len(eager_out) else None
        b = replay_out[i] if i < len(replay_out) else None
        return Difference(
            "segment", len(eager.breaks), f"output {i} of forward(): {describe(a, b)}"
        )
    return None
