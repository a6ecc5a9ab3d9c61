"""``bisect``: the first op where a user's own model diverges under breakable capture.

``FN()`` builds a model and its static inputs on the device and returns ``(forward,
next_step)``: ``forward()`` runs one step and returns its outputs, ``next_step(step)``
prepares step ``step``'s inputs in place. :func:`bisect` builds the model twice (same seed):
one copy runs eagerly, the other is warmed up, captured right after under the target (its
own contract: this library's lets a break return tensors) and replayed. Over ``steps`` steps
it compares every break's arguments and results and every output; at the first difference
it narrows down to one op (:mod:`verification.bisect.locate`), and names its call site in
the user's code, the step and the first differing tensor. On the simulator the stream race
detector is on, and a race is named where it happens.

What it cannot see: a divergence that no break argument, break result or output shows, and
on a GPU a race the device's timing hides. The caller must make ``FN`` deterministic under
``torch.manual_seed`` (both copies must be the same model); :func:`bisect` checks it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from verification.bisect.compare import Tolerance
from verification.bisect.model import load_user_model
from verification.bisect.runs import EagerRun
from verification.bisect.search import Finding, Say, Search
from verification.bisect.trace import Site, internal_dirs
from verification.devices import DeviceKind, device_context
from verification.errors import UsageError
from verification.targets import Target, load_target

__all__ = ["BisectResult", "Finding", "Tolerance", "bisect", "op_trace"]

DEFAULT_TOLERANCE = Tolerance()


@dataclass
class BisectResult:
    ref: str
    target: str
    kind: DeviceKind
    steps: int
    finding: Finding | None
    seconds: float
    phases: dict[str, float] = field(default_factory=dict)

    def line(self) -> str:
        if self.finding is not None:
            return self.finding.line()
        return (
            f"bisect: no divergence in {self.steps} steps of {self.ref} under {self.target} "
            f"({self.kind})"
        )


def _quiet(text: str) -> None:
    return None


def bisect(
    ref: str,
    kind: DeviceKind,
    target: Target | None = None,
    steps: int = 8,
    tol: Tolerance = DEFAULT_TOLERANCE,
    say: Say = _quiet,
) -> BisectResult:
    """Runs ``ref`` (``MODULE:FN``) eagerly and captured under the loaded ``target`` (None:
    the default one) on device ``kind`` for ``steps`` steps and names the first op that
    diverges; ``say`` receives progress lines."""
    if steps < 1:
        raise UsageError(f"steps must be at least 1, got {steps}")
    loaded = load_target() if target is None else target
    model = load_user_model(ref, loaded)
    command = f"python -m verification bisect {ref} --target {loaded.name} --device {kind}"
    search = Search(model, loaded, kind, steps, tol, say, command)
    start = time.perf_counter()
    with device_context(kind, strict_warmup=False), torch.no_grad():
        finding = search.run()
    return BisectResult(
        ref,
        loaded.name,
        kind,
        search.steps_run,
        finding,
        time.perf_counter() - start,
        search.phases,
    )


def op_trace(ref: str, kind: DeviceKind, target: Target | None = None) -> list[tuple[str, Site]]:
    """The ops ``MODULE:FN``'s forward dispatches from the user's lines in one eager run (the
    warm-up), as bisect sees them: (op name, call site) in order. bisect names the same op
    on the simulator as on a GPU only where the two give the same list."""
    loaded = load_target() if target is None else target
    model = load_user_model(ref, loaded)
    with device_context(kind, strict_warmup=False), torch.no_grad():
        trace, _ = EagerRun(model, internal_dirs(loaded.module)).step(None, keep=False)
    return [(op.name, op.site) for op in trace.ops]
