"""Property 2, nested capture: a capture opened inside a capture raises a clear error, the
outer capture stays intact, and a decorated op called inside a decorated op runs inline.

A drawn program is captured; before a drawn step a nested capture is attempted (a new capture
object, one made beforehand, one inside an ``add_eager`` step, one inside a decorated op, or the
open capture itself entered again).
It must raise an error naming the capture, before it begins a graph (a graph whose begin failed
on a capturing stream aborts the process when freed, on a GPU); the outer capture must then
finish, replay equal to eager, and leave nothing active or capturing. A decorated op calling another must run the
inner one exactly once per capture and per replay, and the decorator must keep the op's name,
docstring and signature (as ``functools.wraps`` does). A break of one capture may replay
another capture (a drafter's graph replayed inside a target model's step): every replay must
equal eager and return within the bound (:mod:`verification.bounds`).
"""

from __future__ import annotations

import gc
import inspect
from typing import Any

import torch
from hypothesis import strategies as st

from verification import bounds, breadcrumbs
from verification.causes import Cause, Problem, describe, raised_cause, within
from verification.execute import collector_paused
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
from verification.properties.runs import ProgramRun
from verification.sim.cuda_errors import BEGIN_IN_CAPTURE

NAME = "nested"
# The constructs this check exercises, as causes name them.
NESTED_OP = "a decorated op called a decorated op"  # CAUSE_KINDS["nested-op"].words
NESTED_CAPTURE = "a nested capture"
REPLAY_IN_BREAK = "a replay started inside a break"
_NOT_REFUSED = Cause("nested-capture", NESTED_CAPTURE)
# Where the nested capture is opened: in the region, by a second object made before, inside
# an eager step, inside a decorated op, or by the open capture itself entered again.
PLACES = ("capture", "second-object", "eager-step", "decorated-op", "same-object")
REPLAYS = 2


class _Attempt:
    """Opens a nested capture at one place, once, and remembers what happened."""

    def __init__(self, config: CheckConfig, place: str, at: int) -> None:
        self.target = config.target
        self.place = place
        self.at = at
        self.outcome: BaseException | str | None = "not tried"
        self.prepared = (
            self.target.BreakableCUDAGraphCapture() if place == "second-object" else None
        )
        self.decorated = self.target.eager_break_during_capture(self._try_nested)

    def _try_nested(self, _: Any = None) -> None:
        if self.outcome != "not tried":
            return  # at replay the step only runs, it tries nothing
        if self.place == "same-object":
            inner = self.target.BreakableCUDAGraphCapture.current()
            if inner is None:
                self.outcome = "no open capture to enter again"
                return
        else:
            inner = self.prepared or self.target.BreakableCUDAGraphCapture()
        try:
            with inner:
                pass
        except Exception as error:
            self.outcome = error
        else:
            self.outcome = None

    def hook(self, index: int, env: dict[int, torch.Tensor]) -> None:
        if index != self.at:
            return
        if self.place in ("capture", "second-object", "same-object"):
            self._try_nested()
        elif self.place == "eager-step":
            self.target.BreakableCUDAGraphCapture.current().add_eager(self._try_nested)
        else:
            self.decorated(next(iter(env.values()), None))


def _clear(error: BaseException) -> bool:
    text = str(error).lower()
    return "captur" in text or "nest" in text


def _left_active(target: Any) -> str | None:
    if target.BreakableCUDAGraphCapture.current() is not None:
        return "a capture is still active in this thread"
    if torch.cuda.is_current_stream_capturing():
        return "the caller's stream is still capturing"
    return None


def _nested_capture_problem(
    program: Program, place: str, at: int, config: CheckConfig
) -> str | None:
    attempt = _Attempt(config, place, at)
    try:
        run = ProgramRun(
            program, config.target, config.kind, config.device, config.seed, hook=attempt.hook
        )
    except Exception as error:
        return Problem(
            f"the outer capture failed after a nested capture ({place}): {describe(error)}",
            raised_cause(error, "nested-capture", NESTED_CAPTURE),
        )
    finally:
        left = _left_active(config.target)
    where = (
        f"the open capture entered again (before step {at})"
        if place == "same-object"
        else f"a nested capture ({place}, before step {at})"
    )
    if attempt.outcome is None:
        return Problem(f"{where} was let through", _NOT_REFUSED)
    if isinstance(attempt.outcome, BaseException) and BEGIN_IN_CAPTURE in str(attempt.outcome):
        return Problem(
            f"{where} was refused only by torch's capture_begin on the capturing stream; on a "
            "GPU the CUDAGraph that call leaves behind aborts the process when it is freed "
            "(H200, torch 2.11): refuse a nested capture before beginning a graph",
            _NOT_REFUSED,
        )
    if isinstance(attempt.outcome, BaseException) and not _clear(attempt.outcome):
        return f"{where} raised an unclear error: {describe(attempt.outcome)}"
    if left is not None:
        return f"after {where}: {left}"
    for replay in range(REPLAYS):
        problem = run.replay_problem(config.seed + 1 + replay)
        if problem is not None:
            return within(f"after {where}, replay {replay}: ", problem)
    run.drop()
    return None


def _decorated_op(x: torch.Tensor, out: torch.Tensor, *, scale: float = 1.0) -> None:
    """Writes ``x * scale`` into ``out``."""
    out.copy_(x * scale)


# What the decorator must pass on: tracebacks, profilers and torch.compile name an op by these,
# and code that dispatches on an op's parameters reads its signature.
_IDENTITY = {
    "__name__": lambda fn: fn.__name__,
    "__qualname__": lambda fn: fn.__qualname__,
    "__doc__": lambda fn: fn.__doc__,
    "__module__": lambda fn: fn.__module__,
    "signature": inspect.signature,
}


def _decorator_identity_problem(config: CheckConfig) -> str | None:
    """The decorated op answers for the op it wraps: name, docstring, module, signature."""
    decorated = config.target.eager_break_during_capture(_decorated_op)
    lost = []
    for name, read in _IDENTITY.items():
        try:
            if read(decorated) != read(_decorated_op):
                lost.append(name)
        except (AttributeError, TypeError, ValueError):
            lost.append(name)
    if lost:
        return (
            f"the decorated op does not keep the {', '.join(lost)} of the op it wraps "
            "(use functools.wraps)"
        )
    return None


def _nested_decorated_problem(config: CheckConfig) -> str | None:
    """A decorated op calling a decorated op: the inner one runs inline, once each time."""
    target, device = config.target, config.device
    counts = {"inner": 0}

    @target.eager_break_during_capture
    def inner(x: torch.Tensor, out: torch.Tensor) -> None:
        counts["inner"] += 1
        out.copy_(x * 2)

    @target.eager_break_during_capture
    def outer(x: torch.Tensor, out: torch.Tensor) -> None:
        inner(x, out)
        out.add_(1)

    x = torch.ones(8, device=device)
    out = torch.zeros(8, device=device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    try:
        with torch.cuda.stream(side):
            capture = target.BreakableCUDAGraphCapture()
            with collector_paused(), capture:
                y = x + 1
                outer(y, out)
                z = out * 3
    except Exception as error:  # the target's own failure is the finding (the PyPI peer's)
        return Problem(
            f"a decorated op calling a decorated op failed the capture: {describe(error)}",
            raised_cause(error, "nested-op", NESTED_OP),
        )
    finally:
        torch.cuda.current_stream().wait_stream(side)
    if counts["inner"] != 1:
        return f"the inner decorated op ran {counts['inner']} times at capture, expected once"
    for value in (2.0, -1.0, 5.0):
        counts["inner"] = 0
        x.fill_(value)
        capture.replay()
        torch.cuda.synchronize()
        if counts["inner"] != 1:
            return Problem(
                f"the inner decorated op ran {counts['inner']} times in one replay, expected once",
                Cause("calls", "a replay ran a break more often than the capture recorded it"),
            )
        if not torch.equal(z, torch.full_like(z, ((value + 1) * 2 + 1) * 3)):
            return f"a decorated op calling a decorated op replayed wrong values for input {value}"
    return None


def _replay_inside_break_problem(config: CheckConfig) -> str | None:
    """A break of capture B replays capture A, captured before B: A's replay (its own break
    included) runs inside B's replay, and every replay of B equals eager, within the bound."""
    target, device = config.target, config.device
    drafter_in = torch.zeros(8, device=device)  # A's static input
    step_in = torch.zeros(8, device=device)  # B's static input
    drafted = torch.zeros(8, device=device)  # what B's break copies out of A
    captured: dict[str, Any] = {}

    @target.eager_break_during_capture
    def shift(t: torch.Tensor) -> None:
        t.add_(1)

    @target.eager_break_during_capture
    def draft(h: torch.Tensor, out: torch.Tensor) -> None:
        drafter_in.copy_(h)
        with breadcrumbs.calling("A.replay(), inside a break of B"):
            captured["a"].replay()
        out.copy_(captured["a_out"])

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    try:
        with breadcrumbs.construct(REPLAY_IN_BREAK), torch.cuda.stream(side):
            captured["a"] = target.BreakableCUDAGraphCapture()
            with bounds.bounded("the capture of A"), collector_paused(), captured["a"]:
                doubled = drafter_in * 2
                shift(doubled)
                captured["a_out"] = doubled * 1
            capture_b = target.BreakableCUDAGraphCapture()
            with bounds.bounded("the capture of B, whose break replays A"):
                with collector_paused(), capture_b:
                    h = step_in + 1
                    draft(h, drafted)
                    z = drafted * 3
    except Exception as error:
        return Problem(
            f"capturing a break that replays another capture failed: {describe(error)}",
            raised_cause(error, involves=REPLAY_IN_BREAK),
        )
    finally:
        torch.cuda.current_stream().wait_stream(side)
    for number, value in enumerate((2.0, -1.0, 5.0)):
        step_in.fill_(value)
        try:
            with breadcrumbs.construct(REPLAY_IN_BREAK):
                with bounds.bounded(f"replay {number} of capture B, whose break replays A"):
                    capture_b.replay()
            torch.cuda.synchronize()
        except Exception as error:
            return Problem(
                f"replay {number} of a capture whose break replays another capture raised "
                f"{describe(error)}",
                raised_cause(error, involves=REPLAY_IN_BREAK),
            )
        want = ((value + 1) * 2 + 1) * 3
        if not torch.equal(z, torch.full_like(z, want)):
            return Problem(
                f"replay {number} of a capture whose break replays another capture gave "
                f"{z[0].item()} where eager gives {want}",
                Cause("values", REPLAY_IN_BREAK),
            )
    return None


def _nested_decorated_marked(config: CheckConfig) -> str | None:
    """:func:`_nested_decorated_problem` under its construct's breadcrumb."""
    with breadcrumbs.construct(NESTED_OP):
        problem = _nested_decorated_problem(config)
        gc.collect(1)
    return problem


def example(program: Program, scenario: dict[str, Any], config: CheckConfig) -> str | None:
    """Re-checks one finding's program (a reproducer calls this)."""
    return (
        _decorator_identity_problem(config)
        or _nested_decorated_problem(config)
        or _replay_inside_break_problem(config)
        or _nested_capture_problem(
            program, scenario.get("place", "capture"), scenario.get("before_step", 0), config
        )
    )


def check(config: CheckConfig) -> CheckResult:
    def run() -> tuple[int, list[Finding]]:
        found = Findings(NAME, config)
        found.fixed(_decorator_identity_problem)
        found.fixed(_nested_decorated_marked)
        found.fixed(_replay_inside_break_problem)

        def body(drawn: tuple[Program, str, int]) -> Finding | None:
            program, place, at = drawn
            with breadcrumbs.construct(NESTED_CAPTURE):
                problem = _nested_capture_problem(program, place, at % len(program.steps), config)
                # What the attempt left (a graph whose begin torch refused, held in a cycle
                # through its error) is freed here, where a crash on freeing it names it.
                gc.collect(1)  # the young generations only: cheap, and where it lies
            if problem is None:
                return None
            scenario = (("place", place), ("before_step", at % len(program.steps)))
            return property_finding(NAME, "target-bug", problem, program, config.seed, scenario)

        strategy = st.tuples(program_strategy(config), st.sampled_from(PLACES), st.integers(0, 7))
        found.search(strategy, body)
        return found.result()

    return timed(NAME, run)
