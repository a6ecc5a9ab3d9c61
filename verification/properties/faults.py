"""Property 4, faults: an exception anywhere propagates and leaves everything usable.

Into a drawn program an exception is injected at a drawn point: at every CUDA call a capture
makes (the pool handle it takes when given none, each ``capture_begin``, the first being the
one in ``__enter__``, each segment's ``capture_end``, the last being the one in ``__exit__``),
in the captured region, in an eager step at capture or at replay, or a capture-illegal call
(a device sync, ``.item()``) in the captured region. Each time the exception must propagate,
no stream may be left capturing, no capture active, a decorated call must run eagerly, and
the next capture into the same pool, one into a new pool, and the next replay of a capture
that failed mid-replay, must equal eager. A break that raises at capture and is caught inside the ``with``
block (a fallback to another kernel) must make the capture refuse to close, or replay what ran
at capture: never a capture silently cut short. A warning ``capture_end`` raises must reach
the caller, and its graph must still replay. An
earlier capture freed by the cyclic collector while a capture is open must not break it (the
target keeps the collector off while capturing), and the collector must be on again after;
a caller that turned it off finds it still off after a capture.
Under a contract whose caller freezes the collector (vLLM's, SGLang's), the checker freezes it
as that runner does, and a target that breaks without it gets a ``caller-duty`` note.

The pool is shared with a live graph throughout, as a serving engine's pool is: torch lets a
capture into a pool id only while one of its graphs lives. After a capture-illegal call, torch
itself (2.11, measured on the H200) refuses every later capture into the pool ("already
recording to mempool_id"), whatever the target does; that is reported once as a
``torch-limit`` finding, which never fails a target, and the next capture goes to a new pool.
Likewise torch leaves its CUDA generator in capture mode after a failed ``capture_end``, so
random ops outside a capture raise; a target may clear that (this library does), and where
it did not, the checker notes it as ``torch-limit`` and clears it before going on.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from hypothesis import strategies as st

from verification.causes import Cause, Problem, describe, entry_frame, forwarder, within
from verification.execute import collector_paused
from verification.findings import CALLER_DUTY, TORCH_LIMIT, Finding
from verification.programs import Program
from verification.properties.base import (
    CheckConfig,
    CheckResult,
    Findings,
    program_strategy,
    property_finding,
    timed,
    unusable,
)
from verification.properties.pool import WITNESS
from verification.properties.runs import ProgramRun
from verification.targets.contracts import COLLECTOR, collector_frozen
from verification.usable import LEFT_CAPTURING

NAME = "faults"
POOL_LEFT_RECORDING = "already recording to mempool_id"
RNG_LEFT_CAPTURING = "Offset increment outside graph capture"
POINTS = (
    "pool-handle",
    "capture-begin",
    "captured-region",
    "eager-at-capture",
    "eager-at-replay",
    "capture-end",
    "capture-end-at-exit",
    "illegal-call",
)
# Points a capture reaches once: the last segment's capture_end and the pool handle (taken
# when the capture is made without one).
ONCE_A_CAPTURE = ("capture-end-at-exit", "pool-handle")
INJECTED_WARNING = "a warning injected into capture_end by the checker"
ILLEGAL_CALLS: dict[str, Callable[[dict[int, torch.Tensor]], Any]] = {
    "synchronize": lambda env: torch.cuda.synchronize(),
    "item": lambda env: next(iter(env.values())).sum().item(),
}


class InjectedFault(Exception):
    """The exception the checker injects; it must come out of the target unchanged."""


class Injector:
    """Raises :class:`InjectedFault` at the ``nth`` occurrence of ``point``."""

    def __init__(self, point: str, nth: int, illegal: str) -> None:
        self.point = point
        self.nth = 0 if point in ONCE_A_CAPTURE else nth
        self.illegal = illegal
        self.phase = "warm-up"
        self.count = 0
        self.fired = False

    def _maybe(self, point: str, action: Callable[[], Any] | None = None) -> None:
        if self.fired or point != self.point:
            return
        if self.count == self.nth:
            self.fired = True
            if action is not None:
                action()
            raise InjectedFault(f"injected at {point} #{self.nth}")
        self.count += 1

    def hook(self, index: int, env: dict[int, torch.Tensor]) -> None:
        self._maybe("captured-region")
        if self.point == "illegal-call" and env:
            self._maybe("illegal-call", lambda: ILLEGAL_CALLS[self.illegal](env))

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        @forwarder
        def faulty(*args: Any, **kwargs: Any) -> Any:
            if self.phase in ("capture", "replay"):
                self._maybe(f"eager-at-{self.phase}")
            return fn(*args, **kwargs)

        return faulty

    @contextlib.contextmanager
    def cuda_call_faults(self, capture_class: type) -> Iterator[None]:
        """Faults at the CUDA calls a capture makes: ``torch.cuda.graph_pool_handle`` while the
        target makes or opens the capture; ``CUDAGraph.capture_begin`` (before it begins: the
        first is the one ``__enter__`` makes, the rest begin segments after breaks); and
        ``CUDAGraph.capture_end`` (after it ends the graph; at ``capture-end-at-exit``, the first
        one ``__exit__`` makes, the last segment's, which a drawn count rarely reaches)."""
        graph_class = torch.cuda.CUDAGraph
        originals = {
            "capture_begin": graph_class.capture_begin,
            "capture_end": graph_class.capture_end,
        }
        pool_handle = torch.cuda.graph_pool_handle
        patched = ("__init__", "__enter__", "__exit__")
        own = {name: vars(capture_class)[name] for name in patched if name in vars(capture_class)}
        methods = {name: getattr(capture_class, name) for name in patched}

        def capture_begin(graph: Any, *args: Any, **kwargs: Any) -> Any:
            if self.phase in ("enter", "capture"):
                self._maybe("capture-begin")
            return originals["capture_begin"](graph, *args, **kwargs)

        def capture_end(graph: Any, *args: Any, **kwargs: Any) -> Any:
            result = originals["capture_end"](graph, *args, **kwargs)
            if self.phase in ("capture", "exit"):
                self._maybe("capture-end")
            if self.phase == "exit":
                self._maybe("capture-end-at-exit")
            return result

        def graph_pool_handle() -> Any:
            if self.phase in ("make", "enter"):
                self._maybe("pool-handle")
            return pool_handle()

        def in_phase(name: str, phase: str, after: str | None) -> Callable[..., Any]:
            method = methods[name]

            @functools.wraps(method)
            def phased(capture: Any, *args: Any, **kwargs: Any) -> Any:
                before, self.phase = self.phase, phase
                try:
                    return method(capture, *args, **kwargs)
                finally:
                    self.phase = after if after is not None else before

            return phased

        graph_class.capture_begin = capture_begin
        graph_class.capture_end = capture_end
        torch.cuda.graph_pool_handle = graph_pool_handle
        capture_class.__init__ = in_phase("__init__", "make", None)
        capture_class.__enter__ = in_phase("__enter__", "enter", "capture")
        capture_class.__exit__ = in_phase("__exit__", "exit", "captured")
        try:
            yield
        finally:
            for name, original in originals.items():
                setattr(graph_class, name, original)
            torch.cuda.graph_pool_handle = pool_handle
            for name in patched:
                if name in own:
                    setattr(capture_class, name, own[name])
                else:
                    delattr(capture_class, name)


def _through(error: BaseException) -> str:
    """`` [through path:line, in fn]``: the target's entry point ``error`` came out of, where
    its cleanup belongs, which tells one missing cleanup from another; "" if none."""
    frame = entry_frame(error)
    return "" if frame is None else f" [through {frame}]"


def _fault_cause(left: str, error: BaseException | None) -> Cause:
    """What a fault that left ``left`` behind blames: a stream left capturing, or the cleanup
    missing on the way out of the target's entry point ``error`` came through (the point of
    the fault, and how the check reached it, say only where it was found)."""
    if "capturing" in left and "stream" in left:
        return LEFT_CAPTURING
    frame = None if error is None else entry_frame(error)
    # The entry point, not its line: one missing cleanup shows at each raise inside it.
    through = "" if frame is None else f" [through {frame.path}, in {frame.function}]"
    return Cause("fault-cleanup", f"{left}{through}")


def _left_capturing(streams: list[torch.cuda.Stream]) -> str | None:
    """Whether a stream a capture ran on is still capturing: a target that skipped ending the
    graph leaves it so, and the caller's next work there is recorded instead of run."""
    for stream in streams:
        with torch.cuda.stream(stream):
            if torch.cuda.is_current_stream_capturing():
                return "the stream the capture ran on is still capturing"
    return None


def _left_active(target: Any) -> str | None:
    capture = target.BreakableCUDAGraphCapture
    if capture.current() is not None:
        return "a capture is still active in this thread"
    # is_active() is optional; where a target has it, it is called on the class, as current().
    is_active = getattr(capture, "is_active", None)
    if is_active is not None:
        try:
            if is_active():
                return "BreakableCUDAGraphCapture.is_active() says a capture is still open"
        except TypeError as error:
            return f"BreakableCUDAGraphCapture.is_active() cannot be called on the class: {error}"
    if torch.cuda.is_current_stream_capturing():
        return "the caller's stream is still capturing"
    try:
        torch.cuda.synchronize()
    except RuntimeError as error:
        return f"the device cannot synchronize: a stream is left capturing ({error})"
    return None


def _decorated_call_problem(target: Any, device: str) -> str | None:
    """A decorated function called outside any capture must simply run, eagerly, once."""
    calls: list[None] = []

    @target.eager_break_during_capture
    def add_one(t: torch.Tensor) -> None:
        calls.append(None)
        t.add_(1)

    x = torch.zeros(4, device=device)
    try:
        add_one(x)
        torch.cuda.synchronize()
    except Exception as error:
        return f"a decorated call outside any capture raised {describe(error)}"
    if len(calls) != 1 or not torch.equal(x, torch.ones_like(x)):
        return f"a decorated call outside any capture ran {len(calls)} times, not once, eagerly"
    return None


def _generator_left_capturing(device: str) -> bool:
    """Whether torch left the CUDA generator in capture mode; if so, ends it with an empty
    capture into a new pool (any capture that ends clears the flag)."""
    try:
        torch.rand(1, device=device)
        return False
    except RuntimeError as error:
        if RNG_LEFT_CAPTURING not in str(error):
            raise
    side = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side), warnings.catch_warnings(), collector_paused():
        warnings.simplefilter("ignore")  # "The CUDA Graph is empty"
        graph.capture_begin(pool=torch.cuda.graph_pool_handle())
        graph.capture_end()
    graph.reset()
    return True


def _anchor(pool: Any, device: str) -> torch.cuda.CUDAGraph:
    """A live graph in ``pool``, so the pool id stays shareable whatever the target frees."""
    x = torch.zeros(1, device=device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side), collector_paused():
        graph.capture_begin(pool=pool)
        x.add_(1)
        graph.capture_end()
    torch.cuda.current_stream().wait_stream(side)
    return graph


def _fault_problem(
    program: Program,
    point: str,
    nth: int,
    illegal: str,
    config: CheckConfig,
    limits: set[str] | None = None,
) -> str | None:
    anchor = _anchor(pool := torch.cuda.graph_pool_handle(), config.device)
    try:
        return _faulted_then_recovered(program, point, nth, illegal, config, pool, limits)
    finally:
        anchor.reset()


def _faulted_then_recovered(
    program: Program,
    point: str,
    nth: int,
    illegal: str,
    config: CheckConfig,
    pool: Any,
    limits: set[str] | None,
) -> str | None:
    target = config.target
    injector = Injector(point, nth % 4, illegal)
    where = f"a fault at {point} #{injector.nth}" + (
        f" ({illegal})" if point == "illegal-call" else ""
    )
    propagated: BaseException | None = None
    run: ProgramRun | None = None
    streams: list[torch.cuda.Stream] = []
    try:
        with injector.cuda_call_faults(target.BreakableCUDAGraphCapture):
            run = ProgramRun(
                program,
                target,
                config.kind,
                config.device,
                config.seed,
                # A capture takes its own pool handle only when given none.
                pool=None if point == "pool-handle" else pool,
                hook=injector.hook,
                wrap=injector.wrap,
                streams=streams,
            )
    except Exception as error:
        propagated = error
    if run is not None and point == "eager-at-replay":
        injector.phase = "replay"
        try:
            run.replay_problem(config.seed + 1)
        except Exception as error:
            propagated = error
        injector.phase = "done"
    if not injector.fired:
        return None  # the drawn point does not occur in this program
    if propagated is None:
        return f"{where} was swallowed: no exception came out"
    if point != "illegal-call" and not isinstance(propagated, InjectedFault):
        return f"{where} came out as {describe(propagated)} instead of the injected exception"
    where += _through(propagated)
    left = (
        _left_active(target)
        or _left_capturing(streams)
        or _decorated_call_problem(target, config.device)
    )
    if left is not None:
        return Problem(f"after {where}: {left}", _fault_cause(left, propagated))
    if _generator_left_capturing(config.device) and limits is not None:
        limits.add(
            f"after {point.replace('-', ' ')} faults, torch leaves its CUDA generator in "
            f"capture mode ({RNG_LEFT_CAPTURING!r} on every random op outside a capture) "
            "unless a capture ends; the target did not clear it, the checker did"
        )
    if run is not None:
        problem = run.replay_problem(config.seed + 2)
        if problem is not None:
            return within(f"the replay after {where}: ", problem)
        run.drop()
    try:
        again = ProgramRun(program, target, config.kind, config.device, config.seed, pool=pool)
    except Exception as error:
        if point != "illegal-call" or POOL_LEFT_RECORDING not in str(error):
            return f"the next capture into the same pool after {where} raised {describe(error)}"
        _generator_left_capturing(config.device)  # the refused capture_begin may leave it
        left = _left_active(target)
        if left is not None:  # torch's refusal is a fault at capture-begin the target kept
            return Problem(
                f"after a capture_begin torch refused{_through(error)}: {left}",
                _fault_cause(left, error),
            )
        if limits is not None:
            who = (
                "the simulator, as torch 2.11 on the H200,"
                if config.kind == "sim"
                else f"torch {torch.__version__}"
            )
            limits.add(
                f"after a capture-illegal call, {who} refuses every later capture into the "
                f"same pool ({POOL_LEFT_RECORDING!r}), whatever the target does; the next "
                "capture went to a new pool"
            )
        try:
            again = ProgramRun(
                program,
                target,
                config.kind,
                config.device,
                config.seed,
                pool=torch.cuda.graph_pool_handle(),
            )
        except Exception as error:
            return f"the next capture, into a new pool, after {where} raised {describe(error)}"
    for replay in range(2):
        problem = again.replay_problem(config.seed + 3 + replay)
        if problem is not None:
            return within(f"the next capture after {where}, replay {replay}: ", problem)
    again.drop()
    fresh = unusable(config)  # a capture with a break, into a new pool of its own
    if fresh is not None:
        return f"after {where}, the target is unusable: {fresh}"
    return None


def warning_problem(config: CheckConfig) -> str | None:
    """A warning ``capture_end`` raises, other than torch's empty-graph one, reaches the
    caller, and the graph that raised it replays: a target may hide that one, never the rest,
    and only that one marks a graph empty."""
    target, graph_class = config.target, torch.cuda.CUDAGraph
    original = graph_class.capture_end

    def capture_end(graph: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(graph, *args, **kwargs)
        warnings.warn(INJECTED_WARNING, UserWarning, stacklevel=1)
        return result

    @target.eager_break_during_capture
    def halve(t: torch.Tensor) -> None:
        t.mul_(0.5)

    x = torch.randn(8, device=config.device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph_class.capture_end = capture_end
    try:
        with warnings.catch_warnings(record=True) as caught, torch.cuda.stream(side):
            warnings.simplefilter("always")
            capture = target.BreakableCUDAGraphCapture()
            with collector_paused(), capture:
                y = x * 2
                halve(y)
                y.add_(1)
    finally:
        graph_class.capture_end = original
    torch.cuda.current_stream().wait_stream(side)
    if not any(INJECTED_WARNING in str(w.message) for w in caught):
        return "a warning CUDAGraph.capture_end raised during the capture never reached the caller"
    # Both segments warned and both recorded work: a target that takes any warning for the
    # empty-graph one drops them.
    x.copy_(torch.randn(8, device=config.device))
    capture.replay()
    torch.cuda.synchronize()
    if not torch.equal(y, x * 2 * 0.5 + 1):
        return (
            "a capture whose segments' capture_end raised a warning other than the empty-graph "
            "one replayed wrong values: a graph that recorded work was taken for an empty one"
        )
    return None


def caught_break_problem(config: CheckConfig) -> str | None:
    """A break raises at capture, the caller catches it inside the ``with`` block and falls
    back to captured ops: the capture must raise as it closes, or replay the fallback.

    A target that stops capturing when a break raises and goes on would run the rest of the
    block eagerly, once, and replay a capture cut short at the break, silently stale.
    """
    target = config.target

    @target.eager_break_during_capture
    def fast(t: torch.Tensor, out: torch.Tensor) -> None:
        raise InjectedFault("this input is not supported by the fast kernel")

    x = torch.randn(8, device=config.device)
    out = torch.zeros_like(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    caught = False
    try:
        with torch.cuda.stream(side), collector_paused():
            capture = target.BreakableCUDAGraphCapture()
            with capture:
                y = x * 2
                try:
                    fast(y, out)
                except InjectedFault:
                    caught = True
                    out.copy_(y * 0.5)  # the fallback, captured
                z = out + 1
    except Exception as error:
        if not caught:
            return f"a break that raised at capture reached its caller as {describe(error)}, not as raised"
        left = _left_active(target)  # refused to close: what the check prefers
        if left is None:
            return None
        return Problem(
            f"after a capture refused to close{_through(error)}: {left}", _fault_cause(left, error)
        )
    finally:
        torch.cuda.current_stream().wait_stream(side)
    left = _left_active(target)
    if left is not None:
        return f"after a break's exception was caught inside the capture: {left}"
    x.copy_(torch.randn(8, device=config.device))
    try:
        capture.replay()
        torch.cuda.synchronize()
    except Exception as error:
        return (
            "a break raised at capture and the caller caught it inside the `with` block; the "
            f"capture closed, and its replay raised {describe(error)}"
        )
    if not torch.equal(z, x * 2 * 0.5 + 1):
        return (
            "a break raised at capture and the caller caught it inside the `with` block; the "
            "capture closed without error and its replay left out what ran after the break "
            "(silently stale outputs): refuse to close such a capture"
        )
    return None


def collector_problem(config: CheckConfig, notes: list[str] | None = None) -> str | None:
    """The collector scenario (:func:`collector_scenario_problem`) as the target's caller runs
    it: with the collector frozen where its contract makes that the runner's duty, noting in
    ``notes`` when the target fails without it."""
    if COLLECTOR not in config.target.caller_duties:
        return collector_scenario_problem(config, caller_freezes=False)
    problem = collector_scenario_problem(config, caller_freezes=True)
    if problem is None and notes is not None:
        relies = collector_scenario_problem(config, caller_freezes=False) is not None
        _generator_left_capturing(config.device)  # the broken capture may leave it capturing
        if relies:
            notes.append(config.target.contract.reliance_note(COLLECTOR))
    return problem


def collector_scenario_problem(config: CheckConfig, caller_freezes: bool) -> str | None:
    """An earlier capture that only the cyclic collector can free, made garbage while another
    capture is open, must not break that capture; and the collector is on again afterwards.

    Freeing a graph during a capture breaks the capture on a GPU (``global`` and
    ``thread_local`` modes; bench/probes/reset_during_capture.py), and the collector runs at
    any allocation, so a target has to keep it off while capturing. Run without the harness's
    own pause, with the youngest generation's threshold at 1 so that a collector left on
    runs at once.
    """
    target = config.target
    was_on, thresholds = gc.isenabled(), gc.get_threshold()

    @target.eager_break_during_capture
    def halve(t: torch.Tensor) -> None:
        t.mul_(0.5)

    x = torch.randn(8, device=config.device)
    side = torch.cuda.Stream()  # targets that capture on the caller's stream need a side one
    side.wait_stream(torch.cuda.current_stream())
    old = target.BreakableCUDAGraphCapture()
    with torch.cuda.stream(side), old:
        halve(x * 2)
    gc.collect()
    frozen = collector_frozen() if caller_freezes else contextlib.nullcontext()
    try:
        with frozen, torch.cuda.stream(side), target.BreakableCUDAGraphCapture():
            y = x * 3
            cycle: list[Any] = [old]
            cycle.append(cycle)
            del old, cycle
            gc.set_threshold(1, *thresholds[1:])
            _ = [[] for _ in range(64)]  # allocations: a collector left on runs here
            gc.set_threshold(*thresholds)
            halve(y)
            y.add_(1)
    except Exception as error:
        return (
            "an earlier capture held in a reference cycle, freed by the cyclic collector while "
            f"a capture was open, broke that capture ({describe(error)}): keep the collector off while "
            "capturing"
        )
    finally:
        gc.set_threshold(*thresholds)
        gc.collect()
        torch.cuda.current_stream().wait_stream(side)
    if gc.isenabled() != was_on:
        return "the cyclic collector was left off after the capture closed"
    return None


def collector_kept_off_problem(config: CheckConfig) -> str | None:
    """A caller that turned the collector off before a capture finds it off after the capture
    closes: an engine keeps it off around its whole capture loop (vLLM's
    ``freeze_gc_for_cudagraph_capture`` restores the caller's setting either way), so a target
    that turns it on as a capture closes leaves the engine's next captures unguarded. Checked
    whoever guards the collector: a target that touches the collector must put it back."""
    target = config.target

    @target.eager_break_during_capture
    def halve(t: torch.Tensor) -> None:
        t.mul_(0.5)

    was_on = gc.isenabled()
    x = torch.randn(8, device=config.device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    gc.disable()
    try:
        with torch.cuda.stream(side), target.BreakableCUDAGraphCapture():
            halve(x * 2)
        if gc.isenabled():
            return (
                "the cyclic collector was on after a capture closed, where its caller had "
                "turned it off before the capture opened: put back the caller's setting, not "
                "'on' (an engine keeps it off around its whole capture loop, and its next "
                "capture would run with the collector free to free a graph mid-capture)"
            )
        return None
    finally:
        torch.cuda.current_stream().wait_stream(side)
        if was_on:
            gc.enable()
        else:
            gc.disable()


def example(program: Program, scenario: dict[str, Any], config: CheckConfig) -> str | None:
    """Re-checks one finding's program (a reproducer calls this)."""
    return _fault_problem(
        program,
        scenario.get("point", "captured-region"),
        scenario.get("nth", 0),
        scenario.get("illegal", "synchronize"),
        config,
    )


# Fixed scenarios on the witness program: the calls a capture makes once, which a drawn
# program and point reach rarely, and the commonest fault of all, an exception of the model's
# own code inside the ``with`` block mid-segment.
FIXED_POINTS = (
    "capture-begin",
    "pool-handle",
    "capture-end-at-exit",
    "captured-region",
    "eager-at-replay",
)


def check(config: CheckConfig) -> CheckResult:
    def run() -> tuple[int, list[Finding]]:
        limits: set[str] = set()
        found = Findings(NAME, config)

        def body(drawn: tuple[Program, str, int, str]) -> Finding | None:
            program, point, nth, illegal = drawn
            problem = _fault_problem(program, point, nth, illegal, config, limits)
            if problem is None:
                return None
            nth = 0 if point in ONCE_A_CAPTURE else nth % 4
            scenario = (("point", point), ("nth", nth), ("illegal", illegal))
            return property_finding(NAME, "target-bug", problem, program, config.seed, scenario)

        for point in FIXED_POINTS:
            found.step(functools.partial(body, (WITNESS, point, 0, "synchronize")))
        # The collector scenario notes a target's reliance on its caller's duty (freezing
        # the collector) instead of failing it, under contracts that carry that duty.
        duties: list[str] = []
        collector = functools.partial(collector_problem, notes=duties)
        for fixed in (warning_problem, caught_break_problem, collector, collector_kept_off_problem):
            found.fixed(fixed)
        strategy = st.tuples(
            program_strategy(config),
            st.sampled_from(POINTS),
            st.integers(0, 3),
            st.sampled_from(tuple(ILLEGAL_CALLS)),
        )
        found.search(strategy, body)
        examples, findings = found.result()
        notes = [property_finding(NAME, TORCH_LIMIT, limit) for limit in sorted(limits)]
        notes += [property_finding(NAME, CALLER_DUTY, duty) for duty in duties]
        return examples, findings + notes

    return timed(NAME, run)
