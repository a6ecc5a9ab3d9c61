"""The search behind :func:`verification.bisect.bisect`: steps compared until one differs,
then narrowed to one op, as a :class:`Finding`.

:class:`Search` builds the eager and captured runs, compares them step by step
(:mod:`~verification.bisect.compare`), and hands the first difference to
:mod:`~verification.bisect.locate`. On the simulator it runs under the stream race detector. An
exception raised while the model runs is a finding (exit 1) when the model, the target or a
peer target raised it, named at the user's line: the op or break whose call raised, and for
a break whose result the target refused, the line of its body that returned it. Only one the
harness's own code raised propagates (exit 3).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verification.bisect.compare import Difference, Tolerance, first_diff, first_difference
from verification.bisect.locate import Culprit, compare_ops, in_break_body, structural
from verification.bisect.model import UserModel
from verification.bisect.reproducer import frozen_op_script
from verification.bisect.runs import EagerRun, GraphRun, ModelRaised
from verification.bisect.trace import (
    BreakRecord,
    OpRecord,
    Site,
    internal_dirs,
    site_of_traceback,
)
from verification.causes import raised_by_harness
from verification.devices import DeviceKind
from verification.errors import UsageError
from verification.targets import Target

Say = Callable[[str], None]


def _returned_line(now: BreakRecord, then: BreakRecord | None) -> Site | None:
    """The line to change in a break whose result the target refused: where it returned
    (a view of) an argument, at capture or now, else where it returned now."""
    for record in (then, now):
        if record is not None and record.returned_at is not None and record.returned_an_argument:
            return record.returned_at
    return now.returned_at


@dataclass(frozen=True)
class Finding:
    """What bisect names: the op, its call site, the step, the first differing tensor."""

    kind: str
    op: str
    site: Site | None
    step: int  # -1: the warm-up or the capture, before any step
    tensor: str
    reason: str
    reproduce: str
    reproducer: str | None = None  # a standalone script, when bisect can write one
    change: Site | None = None  # the line to change, when it is not ``site``

    @property
    def where(self) -> str:
        return _shown(self.site)

    def line(self) -> str:
        step = "before the first step" if self.step < 0 else f"at step {self.step}"
        change = f" (change {_shown(self.change)})" if self.change is not None else ""
        return f"bisect: {self.kind}: {self.op} at {self.where}{change}, {step}"

    def lines(self) -> list[str]:
        out = [f"op:       {self.op}", f"where:    {self.where}"]
        if self.change is not None:
            out.append(f"change:   {_shown(self.change)}")
        out.append(f"kind:     {self.kind}")
        out.append(f"step:     {self.step if self.step >= 0 else 'warm-up/capture'}")
        if self.tensor:
            out.append(f"tensor:   {self.tensor}")
        out.append(f"why:      {self.reason}")
        out.append(f"again:    {self.reproduce}")
        if self.reproducer is not None:
            out += ["---- reproducer ----", self.reproducer.rstrip("\n"), "--------------------"]
        return out


def _shown(site: Site | None) -> str:
    if site is None:
        return "(no line of yours)"
    path = os.path.abspath(site[0])
    here = os.getcwd() + os.sep
    return f"{path[len(here) :] if path.startswith(here) else path}:{site[1]}"


class Search:
    def __init__(
        self,
        model: UserModel,
        target: Target,
        kind: DeviceKind,
        steps: int,
        tol: Tolerance,
        say: Say,
        command: str,
    ) -> None:
        self.model, self.target, self.kind, self.steps = model, target, kind, steps
        self.tol, self.say, self.command = tol, say, command
        self.internal = internal_dirs(target.module)
        self.steps_run = 0
        self.phases: dict[str, float] = {}
        self.step = -1

    def _timed(self, phase: str, started: float) -> None:
        self.phases[phase] = self.phases.get(phase, 0.0) + time.perf_counter() - started

    def run(self) -> Finding | None:
        races: Any = None
        if self.kind == "sim":
            from verification.sim.races import StreamRaceError, detect_races

            races = StreamRaceError
            guard: Any = detect_races()
        else:
            guard = contextlib.nullcontext()
        try:
            with guard:
                return self._compare()
        except ModelRaised as raised:
            error = raised.error
            if races is not None and isinstance(error, races):
                return self._race(error)
            if raised_by_harness(error):
                raise error from None  # the harness's own code raised: exit 3
            return self._raised(raised)

    def _raised(self, raised: ModelRaised) -> Finding:
        """The model, the target or a peer raised: named at the user's line."""
        error = raised.error
        message = f"{type(error).__name__}: {' '.join(str(error).split())[:400]}"
        site = site_of_traceback(error.__traceback__, self.internal)
        trace = raised.trace
        op, change = type(error).__name__, None
        last = trace.breaks[-1] if trace is not None and trace.breaks else None
        pending = trace.pending if trace is not None else None
        if pending is not None and pending.site == site:
            op = pending.name
            if raised.what == "capture":
                message += (
                    " (the eager warm-up ran this line; the capture refused it: an op that "
                    "reads device values on the host must run in a break)"
                )
        elif last is not None and last.returned_at is not None and site in (None, last.site):
            # The break returned and the target raised on the way back: its result.
            captured = raised.capture.breaks if raised.capture is not None else []
            then = captured[last.index] if last.index < len(captured) else None
            # A replayed break is called by the target, not from a line of the user's: its
            # call site is the capture's.
            op, site = f"break {last.name}", then.site if then is not None else last.site
            change = _returned_line(last, then)
            message += f" (raised by the target after break {last.name} returned"
            if then is not None and then.returned_at not in (None, last.returned_at):
                message += (
                    f": at capture it returned at {_shown(then.returned_at)}, at this "
                    f"{raised.what} at {_shown(last.returned_at)}"
                )
            message += ")"
        elif last is not None and site == last.site and last.returned_at is None:
            op = f"break {last.name}"  # its call raised before or inside its body
        elif site is None and last is not None:
            op, site = f"break {last.name}", last.site
            message += f" (raised by the target; the last break it called was {last.name})"
        step = -1 if raised.what in ("warm-up", "capture") else self.step
        return Finding(
            f"{raised.what} raised",
            op,
            site,
            step,
            "",
            message,
            self.command + f" --steps {max(step, 0) + 1}",
            change=change,
        )

    def _race(self, error: Any) -> Finding:
        site = site_of_traceback(error.__traceback__, self.internal)
        current = error.current
        return Finding(
            "stream race",
            current.op,
            site,
            self.step,
            f"device memory {error.address:#x}",
            f"{current} is not ordered after {error.previous}; make the stream wait "
            "(wait_stream / wait_event) before it reads or writes",
            self.command + f" --steps {max(self.step, 0) + 1}",
        )

    def _finding(self, culprit: Culprit, step: int, tensor: str) -> Finding:
        finding = Finding(
            culprit.kind,
            culprit.op,
            culprit.site,
            step,
            culprit.tensor or tensor,
            culprit.reason,
            self.command + f" --steps {step + 1}",
        )
        if culprit.calls is None:
            return finding
        script = frozen_op_script(
            culprit.op, finding.where, *culprit.calls, step, self.target, self.kind == "sim"
        )
        return dataclasses.replace(finding, reproducer=script)

    def _compare(self) -> Finding | None:
        started = time.perf_counter()
        eager = EagerRun(self.model, self.internal)
        warmup, warm_out = eager.step(None)
        graph = GraphRun(self.model, self.internal, self.target)
        counted = getattr(graph.capture, "num_eager_breaks", None)
        if isinstance(counted, int) and counted != len(graph.capture_trace.breaks):
            raise UsageError(
                f"the capture has {counted} breaks but bisect saw "
                f"{len(graph.capture_trace.breaks)}: some break was decorated before bisect "
                "imported your module (in a module imported earlier in this process); run "
                "bisect in a fresh process"
            )
        if first_diff(warm_out, graph.warmup_outputs, self.tol) is not None:
            raise UsageError(
                f"{self.model.ref}() built two different models from the same seed: bisect "
                "builds it twice (eager, captured), so FN must be deterministic under "
                "torch.manual_seed"
            )
        self._timed("build, warm up, capture", started)
        segments = len(graph.capture_trace.breaks) + 1
        self.say(
            f"captured {self.model.ref} under {self.target.name}: {segments} graph segments, "
            f"{segments - 1} breaks, {sum(1 for op in graph.capture_trace.ops if op.in_break is None)} "
            "graph ops"
        )
        for step in range(self.steps):
            self.step = step
            started = time.perf_counter()
            e_trace, e_out = eager.step(step)
            r_trace, r_out = graph.step(step)
            self.steps_run = step + 1
            diff = first_difference(e_trace, e_out, r_trace, r_out, self.tol)
            self._timed("compare steps", started)
            if diff is None:
                self.say(f"step {step}: replay equals eager")
                continue
            self.say(f"step {step}: differs at {diff.tensor}")
            started = time.perf_counter()
            try:
                return self._locate(diff, step, graph, warmup, e_trace)
            finally:
                self._timed("narrow down", started)
        return None

    def _locate(
        self, diff: Difference, step: int, graph: GraphRun, warmup: Any, e_trace: Any
    ) -> Finding:
        if diff.kind == "break-count":
            found = structural(graph.capture_trace, warmup, e_trace, diff.index)
            culprit = found or Culprit(
                "host branch",
                "a break",
                None,
                "eager and the replay called different numbers of breaks",
            )
            return self._finding(culprit, step, diff.tensor)
        if diff.kind == "break-host-args":
            brk = e_trace.breaks[diff.index]
            return self._finding(
                Culprit(
                    "frozen host value",
                    f"break {brk.name}",
                    brk.site,
                    "a replayed break receives the non-tensor arguments it was captured with; "
                    "pass host values that change per step inside a tensor or an object the "
                    "break reads",
                ),
                step,
                diff.tensor,
            )
        if diff.kind == "break":
            # A host value the capture froze before the break (a sampler's temperature)
            # reaches it as an argument the break overwrites: the graph op is the cause.
            found = structural(graph.capture_trace, warmup, e_trace, diff.index)
            if found is not None:
                return self._finding(found, step, diff.tensor)
            self.say(f"narrowing: the body of break {e_trace.breaks[diff.index].name}")
            culprit = self._break_body(diff.index, step)
            if culprit is None:
                brk = e_trace.breaks[diff.index]
                culprit = Culprit(
                    "divergence",
                    f"break {brk.name}",
                    brk.site,
                    "its inputs agree but its results differ, and no op of its body shows why",
                )
            return self._finding(culprit, step, diff.tensor)
        moved = self._moved_arguments(graph, diff.index)
        if moved is not None:
            return self._finding(moved, step, diff.tensor)
        self.say(f"narrowing: graph segment {diff.index}, comparing the capture with eager")
        found = structural(graph.capture_trace, warmup, e_trace, diff.index)
        if found is not None:
            return self._finding(found, step, diff.tensor)
        self.say(f"narrowing: graph segment {diff.index}, its ops forced into breaks")
        found = self._forced(diff.index, step, graph)
        if found is None:
            after = (
                f"break {e_trace.breaks[diff.index].name}"
                if diff.index < len(e_trace.breaks)
                else "the outputs"
            )
            found = Culprit(
                "target",
                f"segment {diff.index} -> {after}",
                e_trace.breaks[diff.index].site if diff.index < len(e_trace.breaks) else None,
                "every op of the segment replays as eager, yet what reaches "
                f"{after} differs: the target handed over other tensors than the capture's",
            )
        return self._finding(found, step, diff.tensor)

    def _moved_arguments(self, graph: GraphRun, brk: int) -> Culprit | None:
        """A break replayed on other storage than it was captured with: the target's fault
        (a replayed break must see the capture's tensors at the same addresses)."""
        captured = graph.capture_trace.breaks
        replayed = graph.last_trace.breaks if graph.last_trace is not None else []
        if brk >= min(len(captured), len(replayed)):
            return None
        if captured[brk].input_ptrs == replayed[brk].input_ptrs:
            return None
        return Culprit(
            "target",
            f"break {captured[brk].name}",
            captured[brk].site,
            "the target replayed this break on other tensors than it was captured with "
            "(other device addresses), so it reads what the graph never wrote",
        )

    def _break_body(self, brk: int, step: int) -> Culprit | None:
        armed = [False]

        def detail(op: OpRecord) -> bool:
            return armed[0] and op.in_break == brk

        eager = EagerRun(self.model, self.internal, detail=detail)
        eager.step(None, keep=False)
        graph = GraphRun(self.model, self.internal, self.target, detail=detail)
        for s in range(step + 1):
            armed[0] = s == step
            e_trace, _ = eager.step(s, keep=armed[0])
            r_trace, _ = graph.step(s, keep=armed[0])
        return in_break_body(e_trace, r_trace, brk, self.tol)

    def _forced(self, segment: int, step: int, previous: GraphRun) -> Culprit | None:
        if not self.target.supports_tensor_returns:
            self.say("narrowing stops: the target's contract lets no break return a tensor")
            return None
        positions = {
            op.index: pos
            for pos, op in enumerate(previous.capture_trace.graph_ops(segment))
            if op.forceable and op.device
        }
        self.say(f"narrowing: {len(positions)} ops of segment {segment} replayed as breaks")
        armed = [False]

        def detail(op: OpRecord) -> bool:
            return armed[0] and op.segment == segment and op.in_break is None

        def force(op: OpRecord) -> bool:
            return op.index in positions and op.segment == segment and op.in_break is None

        eager = EagerRun(self.model, self.internal, detail=detail)
        eager.step(None, keep=False)
        graph = GraphRun(self.model, self.internal, self.target, force=force)
        for s in range(step + 1):
            armed[0] = s == step
            e_trace, _ = eager.step(s, keep=armed[0])
            graph.step(s, keep=armed[0])
        ops = e_trace.graph_ops(segment)
        for seen in graph.tracer.forced_ptrs.values():
            if len(seen) == 2 and seen[0] != seen[1]:
                return Culprit(
                    "target",
                    "an op replayed as a break",
                    None,
                    "the target replays a break on other tensors than it was captured with "
                    "(other device addresses); forced breaks see it as the user's breaks do",
                )
        replayed = {positions[i]: seen for i, seen in graph.tracer.forced.items() if i in positions}
        return compare_ops(e_trace, ops, replayed, self.tol)
