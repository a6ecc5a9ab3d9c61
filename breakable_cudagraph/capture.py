"""``BreakableCUDAGraphCapture``: records a region as a chain of CUDA graphs and eager steps.

Inside ``with capture:`` work is captured into a graph segment on the caller's stream (a side
stream when the caller is on the default stream); each
``add_eager(fn)`` ends the segment, runs ``fn`` eagerly, records it and begins the next segment.
``replay()`` runs the chain in order on the current stream. All segments share one memory pool.
An exception anywhere inside the block aborts cleanly: no stream is left capturing, the caller's
stream and the thread's state are restored, and the original exception propagates. While a
capture is open Python's cyclic collector is paused (``collector``): it would otherwise free
graphs held in reference cycles mid-capture, which breaks the capture on a GPU.
"""

from __future__ import annotations

import enum
import functools
import gc
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

import torch

from . import ambient, collector, executables, thread_state
from .arguments import (
    PoolMemory,
    hold_call_arguments,
    hold_for_replay,
    resolve_caller_objects,
)
from .segments import (
    GRAPH_LOCK,
    EagerStep,
    GraphSegment,
    argument_storages,
    call_within,
    copy_result_back,
    end_graph,
    never_free,
)
from .switch import graphs_disabled
from .thread_state import enter_eager_step, exit_eager_step
from .trees import tensor_leaves

T = TypeVar("T")

CAPTURE_ERROR_MODES = ("global", "thread_local", "relaxed")
# The capture error mode of every capture open in the process, by capture. Under "global"
# another thread's capture invalidates this one with its eager steps (a sync, an allocation),
# and torch 2.11 then crashed the process by SIGSEGV in capture_end on the H200, in about one
# run in three of a 30-second thread check. So a global capture overlaps no other thread's
# capture: the later one is refused, before a graph exists.
_OPEN_CAPTURES: dict[int, tuple[int, str]] = {}
_OPEN_LOCK = threading.Lock()


def _claim_overlap(capture: Any, mode: str) -> None:
    me = threading.get_ident()
    with _OPEN_LOCK:
        others = [m for thread, m in _OPEN_CAPTURES.values() if thread != me]
        if others and "global" in (mode, *others):
            raise RuntimeError(
                "another thread is capturing, and a capture_error_mode='global' capture cannot "
                "overlap another thread's: each one's eager steps would invalidate the other's "
                "capture. Capture with capture_error_mode='thread_local' (the default) in every "
                "thread, or from one thread at a time"
            )
        _OPEN_CAPTURES[id(capture)] = (me, mode)


def _release_overlap(capture: Any) -> None:
    with _OPEN_LOCK:
        _OPEN_CAPTURES.pop(id(capture), None)


class _State(enum.Enum):
    NEW = "new"
    CAPTURING = "capturing"
    EAGER = "eager"  # open, graphs disabled
    CAPTURED = "captured"
    RAN_EAGERLY = "ran eagerly"
    FAILED = "failed"
    RESET = "reset"


_OPEN = frozenset({_State.CAPTURING, _State.EAGER})

_REPLAY_REFUSALS = {
    _State.NEW: "nothing has been captured yet; run the work inside `with capture:` first",
    _State.CAPTURING: "replay() was called inside the capture's own `with` block; "
    "call it after the block ends",
    _State.EAGER: "replay() was called inside the capture's own `with` block; "
    "call it after the block ends",
    _State.RAN_EAGERLY: "nothing to replay: the capture ran eagerly because graphs are disabled "
    "(enabled=False or BREAKABLE_CUDAGRAPH_DISABLE=1); run the work directly instead",
    _State.FAILED: "the capture failed with an exception and holds no graphs; "
    "create a new BreakableCUDAGraphCapture and capture again",
    _State.RESET: "the capture was reset(); create a new BreakableCUDAGraphCapture "
    "and capture again",
}


# Measured on the H200 with torch 2.11 (bench/probes/pool_recovery.py): nothing reachable
# from Python ends the allocation routing a failed capture_end leaves on its pool.
_POOL_LEFT_RECORDING = (
    "CUDA invalidated this capture, and torch then keeps its memory pool {pool} recording: "
    "every later capture into that pool fails with 'beginAllocateToPool: already recording "
    "to mempool_id'. Capture again into a new pool."
)


def _end_generators_capture(exc: BaseException) -> None:
    """Clears the capture flag a failed ``capture_end`` leaves on the CUDA generators.

    torch skips the generators' capture epilogue when ``capture_end`` raises, and the
    default generator then refuses every random op outside a capture ("Offset increment
    outside graph capture encountered unexpectedly", on the H200 with torch 2.11) until a
    capture ends; an empty capture into a new pool ends one.
    """
    try:
        with GRAPH_LOCK:
            graph = torch.cuda.CUDAGraph()
            try:
                # Thread-local: another thread's capture must neither end this one nor be ended.
                graph.capture_begin(
                    pool=torch.cuda.graph_pool_handle(), capture_error_mode="thread_local"
                )
            except BaseException:
                never_free(graph)
                raise
            end_graph(graph)
            graph.reset()
    except Exception as secondary:
        _note(exc, f"clearing the CUDA generators' capture state also failed: {secondary!r}")


def _call_with_caller_objects(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    return fn(*resolve_caller_objects(args), **resolve_caller_objects(kwargs))


def _callable_name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def _note(exc: BaseException, text: str) -> None:
    if hasattr(exc, "add_note"):  # Python >= 3.11
        exc.add_note(text)


# (eager step's call, its capture-time result holds tensors, the step, next graph's launch)
_PlanEntry = tuple[Callable[[], Any], bool, EagerStep, Callable[[], None] | None]


def _launches(graphs: list[Callable[[], None]]) -> Callable[[], None] | None:
    """One call that launches ``graphs`` in order (None for none)."""
    if len(graphs) < 2:
        return graphs[0] if graphs else None

    def launch_all() -> None:  # graphs are never adjacent in a chain; kept correct if they were
        for launch in graphs:
            launch()

    return launch_all


def _replay_plan(
    segments: list[GraphSegment | EagerStep],
) -> tuple[Callable[[], None] | None, list[_PlanEntry]]:
    """The chain as replay() runs it: the opening graph launch, then one entry per eager step."""
    head: list[Callable[[], None]] = []
    graphs = head  # the launches that follow the last eager step seen
    steps: list[tuple[EagerStep, list[Callable[[], None]]]] = []
    for segment in segments:
        if isinstance(segment, GraphSegment):
            graphs.append(segment.launch)
        else:
            graphs = []
            steps.append((segment, graphs))
    plan = [
        (
            # A break called inside the region's own ``with`` blocks has them applied around
            # its call; the rest pay nothing for it.
            step.call
            if step.ambient is None
            else functools.partial(call_within, step.ambient, step.call),
            step.returns_tensors,
            step,
            after[0] if len(after) == 1 else _launches(after),
        )
        for step, after in steps
    ]
    return _launches(head), plan


def _capture_stream(caller: torch.cuda.Stream) -> torch.cuda.Stream:
    """The stream a capture runs on when none is given: the caller's own, unless it is the
    default stream, on which CUDA refuses to capture.

    Capturing on the stream that replays matters for speed, not correctness. On the H200
    (torch 2.11) a chain captured on a stream of its own, whose eager step therefore
    ran there at capture, replays every kernel about 0.18 us slower on the caller's stream:
    +46 to +52 us at one break for a 256-kernel body, against +1.5 to +3.5 us when the same
    chain is captured on the caller's stream (``bench/probes/state_trigger.py``).
    """
    if caller == torch.cuda.default_stream():  # current_stream()'s device, as the caller's
        return torch.cuda.Stream()
    return caller


class BreakableCUDAGraphCapture:
    """Capture a region as CUDA graph segments separated by eager steps; replay it later.

    ``pool``: memory pool handle shared by every segment (default: a new
    ``torch.cuda.graph_pool_handle()``); pass ``other.pool`` to share across captures.
    ``stream``: the stream to capture on (default: the caller's current stream, as vLLM
    captures, or a new ``torch.cuda.Stream()`` when that is the default stream, which cannot
    capture; see ``_capture_stream``).
    ``strict=True`` rejects eager steps that return tensors. ``enabled=False`` (or
    ``BREAKABLE_CUDAGRAPH_DISABLE=1`` when ``enabled`` is None) runs the block eagerly.
    ``gc_collect=True`` frees memory for the graph on entry, as ``torch.cuda.graph`` does:
    syncs the caller's stream, runs ``gc.collect()`` and empties the allocator's cache.
    ``capture_error_mode`` is CUDA's (default ``"thread_local"``); a ``"global"`` capture
    overlaps no other thread's capture: whichever opens second raises.
    ``share_executables=True`` (or ``BREAKABLE_CUDAGRAPH_SHARE_EXECUTABLES=1`` when None) lets
    each segment share one instantiated executable with the segment at its position in other
    captures of the pool that launch the same kernels, switched by ``cudaGraphExecUpdate`` when
    another capture replays (see ``executables``; needs the ``cuda-bindings`` package). It
    saves device memory and instantiation; a replay after another size's pays the switch.
    Segments that draw random numbers advance the generator by the shared executable's count.
    """

    def __init__(
        self,
        pool: Any = None,
        *,
        stream: torch.cuda.Stream | None = None,
        capture_error_mode: str = "thread_local",
        strict: bool = False,
        enabled: bool | None = None,
        gc_collect: bool = False,
        share_executables: bool | None = None,
    ) -> None:
        if capture_error_mode not in CAPTURE_ERROR_MODES:
            raise ValueError(
                f"capture_error_mode={capture_error_mode!r} is not valid; "
                f"use one of {', '.join(CAPTURE_ERROR_MODES)}"
            )
        self.pool = pool if pool is not None else torch.cuda.graph_pool_handle()
        self.capture_error_mode = capture_error_mode
        self.strict = strict
        self.enabled = enabled
        self.gc_collect = gc_collect
        self.share_executables = executables.sharing(share_executables)
        self._requested_stream = stream
        self._state = _State.NEW
        self._segments: list[GraphSegment | EagerStep] = []
        # What replay() calls, bound once when the capture closes: the launch of the graph
        # that opens the chain, if any, then per eager step its call, whether its
        # capture-time result holds tensors, the step itself (for its result's check) and the
        # launch of the graph that follows it, if any. One entry per break rather than per
        # segment: replay runs this loop once per break.
        self._replay_head: Callable[[], None] | None = None
        self._replay_plan: list[_PlanEntry] = []
        # Empty graphs are kept until the capture closes: resetting one mid-capture could drop
        # the pool's last user while the pool still has live allocations.
        self._empty_graphs: list[torch.cuda.CUDAGraph] = []
        self._open_graph: torch.cuda.CUDAGraph | None = None
        self._pool_memory = PoolMemory(self.pool)
        self._caller_stream: torch.cuda.Stream | None = None
        self._stream: torch.cuda.Stream | None = None
        self._stream_context: Any = None
        self._eager_step_error: BaseException | None = None
        self._collector_paused = False
        # The ambient state the capture was entered under: a break called under another
        # (inside an autocast block of the region, say) has the difference applied at replay.
        self._entry_state: ambient.State | None = None

    # ---- thread-local view -------------------------------------------------------------------
    @classmethod
    def current(cls) -> BreakableCUDAGraphCapture | None:
        """The capture open in this thread, or None."""
        return thread_state.active_capture()

    @classmethod
    def is_active(cls) -> bool:
        """True while a capture is open in this thread."""
        return thread_state.active_capture() is not None

    # ---- introspection -----------------------------------------------------------------------
    @property
    def segments(self) -> list[GraphSegment | EagerStep]:
        """The recorded chain, in replay order."""
        return list(self._segments)

    @property
    def num_graphs(self) -> int:
        return sum(isinstance(s, GraphSegment) for s in self._segments)

    @property
    def num_eager_breaks(self) -> int:
        return sum(isinstance(s, EagerStep) for s in self._segments)

    @property
    def stream(self) -> torch.cuda.Stream | None:
        """The stream the capture runs on (None before entry)."""
        return self._stream

    # ---- context manager ---------------------------------------------------------------------
    def __enter__(self) -> BreakableCUDAGraphCapture:
        # Checked before any state changes so an open outer capture is left untouched.
        if thread_state.active_capture() is not None:
            raise RuntimeError(
                "Nested BreakableCUDAGraphCapture: a capture is already open in this thread; "
                "close it first, or use add_eager/eager_break_during_capture inside it"
            )
        if self._state is not _State.NEW:
            raise RuntimeError(
                "a BreakableCUDAGraphCapture captures only once; create a new one to capture again"
            )
        if torch.cuda.is_current_stream_capturing():
            # Refused before any graph exists: a CUDAGraph whose capture_begin fails on a
            # capturing stream aborts the process when it is freed (H200, torch 2.11,
            # bench/probes/failed_capture_begin.py).
            raise RuntimeError(
                "BreakableCUDAGraphCapture opened while the current stream is already capturing "
                "(inside torch.cuda.graph?); nested captures are not supported, close that "
                "capture first"
            )
        eager = graphs_disabled(self.enabled)
        if not eager and self.gc_collect:
            # Freeing memory for the graph, as torch.cuda.graph does, is opt-in: it costs
            # about 0.3 ms per capture on the H200, and empty_cache's cudaFree
            # invalidates another thread's capture in global mode. Only the caller's stream
            # is synced, not the device: a device-wide sync invalidates another thread's
            # capture even in thread_local mode, while a stream sync is legal there.
            torch.cuda.current_stream().synchronize()
            gc.collect()
            torch.cuda.empty_cache()
        if not eager:
            _claim_overlap(self, self.capture_error_mode)
            self._entry_state = ambient.record()
        self._caller_stream = torch.cuda.current_stream()
        self._stream = self._requested_stream or _capture_stream(self._caller_stream)
        if self._stream != self._caller_stream:
            self._stream.wait_stream(self._caller_stream)
        self._stream_context = torch.cuda.stream(self._stream)
        self._stream_context.__enter__()
        thread_state.set_active_capture(self)
        self._state = _State.EAGER if eager else _State.CAPTURING
        if not eager:
            collector.pause()
            self._collector_paused = True
            try:
                self._begin_graph()
            except BaseException as exc:
                self._abort(exc)
                raise
            # The open graph now keeps the pool's segments in place: what other captures of
            # the pool know of it holds for this one too.
            self._pool_memory.attach()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if exc is not None:
            self._abort(exc)
            return False
        if self._state is _State.EAGER:
            self._close_streams()
            thread_state.set_active_capture(None)
            self._state = _State.RAN_EAGERLY
            return False
        try:
            if self._eager_step_error is not None:
                raise RuntimeError(
                    "an eager step raised during capture and the exception was caught inside "
                    "the `with` block; the capture is incomplete, let the exception propagate"
                ) from self._eager_step_error
            self._end_graph()
            if self.share_executables:
                self._share_executables()
        except BaseException as error:
            self._abort(error)
            raise
        self._close_streams()
        self._resume_collector()
        self._pool_memory.capture_closed()
        thread_state.set_active_capture(None)
        _release_overlap(self)
        self._state = _State.CAPTURED
        self._replay_head, self._replay_plan = _replay_plan(self._segments)
        self._settle_empty_graphs()
        return False

    # ---- breaks ------------------------------------------------------------------------------
    def add_eager(self, fn: Callable[[], T]) -> T:
        """End the current segment, run ``fn()`` eagerly, record it, begin the next segment.

        ``fn`` is kept as given for replay: whatever it closes over stays alive as long as the
        capture. Use :func:`eager_break_during_capture` to have arguments held without keeping
        capture intermediates alive.
        """
        if not callable(fn):
            raise TypeError(
                f"add_eager() needs a callable taking no arguments, got {type(fn).__name__}"
            )
        return self._eager_break(fn, (), {}, hold_arguments=False)

    def add_eager_call(
        self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> T:
        """Like ``add_eager`` for ``fn(*args, **kwargs)``, holding the arguments for replay.

        Tensors in pool memory are held by non-owning aliases, all others strongly (see
        ``arguments.hold_for_replay``).
        """
        if not callable(fn):
            raise TypeError(f"add_eager_call() needs a callable, got {type(fn).__name__}")
        return self._eager_break(fn, args, kwargs, hold_arguments=True)

    def _eager_break(
        self,
        fn: Callable[..., T],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        hold_arguments: bool,
    ) -> T:
        if thread_state.active_capture() is not self or self._state not in _OPEN:
            raise RuntimeError(
                "eager breaks need this capture open in this thread; call inside `with capture:`"
            )
        if self._state is _State.EAGER or thread_state.in_eager_step():
            enter_eager_step()
            try:
                return fn(*args, **kwargs)
            finally:
                exit_eager_step()
        return self._captured_break(fn, args, kwargs, hold_arguments)

    def _decorated_break(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: Any) -> T:
        """``add_eager_call`` for ``eager_break_during_capture``, which has already found this
        capture open in this thread and no eager step running: only the state is left to check."""
        if self._state is not _State.CAPTURING:
            return self._eager_break(fn, args, kwargs, hold_arguments=True)
        return self._captured_break(fn, args, kwargs, True)

    def _captured_break(
        self,
        fn: Callable[..., T],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        hold_arguments: bool,
    ) -> T:
        called_under = ambient.read()
        self._end_graph()
        try:
            # enter/exit rather than a generator-based context manager, which costs more than
            # the rest of the bookkeeping.
            enter_eager_step()
            try:
                result = fn(*args, **kwargs)
            finally:
                exit_eager_step()
            self._record_step(fn, args, kwargs, result, hold_arguments, called_under)
        except BaseException as exc:
            self._eager_step_error = exc
            raise
        self._begin_graph()
        return result

    def _record_step(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        result: Any,
        hold_arguments: bool,
        called_under: ambient.State,
    ) -> None:
        name = _callable_name(fn)
        if self.strict and tensor_leaves(result):
            raise TypeError(
                f"eager step {name} returned a tensor in a strict capture; with strict=True a "
                "break must write into tensors it was given and return None (or use strict=False)"
            )
        if hold_arguments and (args or kwargs):
            args, kwargs, resolved_per_call = hold_call_arguments(args, kwargs, self._pool_memory)
            call: Callable[[], Any]
            if resolved_per_call:
                # The caller's containers are looked up at each call (see CallerObject).
                call = functools.partial(_call_with_caller_objects, fn, args, kwargs)
            elif kwargs:
                call = functools.partial(fn, *args, **kwargs)
            else:  # without an empty keyword dict the partial is a little cheaper to make
                call = functools.partial(fn, *args)
        else:
            call = fn
        # Most breaks return None: skip the tree walk of holding a result (a capture cost).
        static_result = None if result is None else hold_for_replay(result, self._pool_memory)
        # Whether each returned tensor aliases an argument must stay as at capture (see
        # copy_result_back); only breaks that return tensors pay for the walk.
        memory = (
            argument_storages(resolve_caller_objects((args, kwargs)))
            if static_result is not None and tensor_leaves(static_result)
            else frozenset()
        )
        changed = ambient.delta(called_under, self._entry_state)
        self._segments.append(EagerStep(name, call, static_result, memory, changed))

    # ---- replay and teardown -----------------------------------------------------------------
    def replay(self) -> None:
        """Run every segment in order on the current stream; each eager step runs once."""
        if self._state is not _State.CAPTURED:
            raise RuntimeError(
                f"cannot replay this BreakableCUDAGraphCapture: {_REPLAY_REFUSALS[self._state]}"
            )
        # The first graph is launched before any bookkeeping, so the GPU starts as early as
        # with a bare list of launches; then one eager-step mark covers the rest of the chain
        # rather than one mark per step: graph launches run no Python, and marking each step
        # cost more than the rest of a break's replay.
        head = self._replay_head
        if head is not None:
            head()
        plan = self._replay_plan
        if not plan:
            return
        enter_eager_step()
        try:
            for call, returns_tensors, step, launch in plan:
                result = call()
                if result is not None or returns_tensors:
                    copy_result_back(step.name, step.static_result, result, step.argument_memory)
                if launch is not None:
                    launch()
        finally:
            exit_eager_step()

    def reset(self) -> None:
        """Free the graphs and drop every held reference; the capture can no longer replay."""
        if self._state in (_State.CAPTURING, _State.EAGER):
            raise RuntimeError(
                "reset() was called inside the capture's `with` block; call it after"
            )
        self._release_all()
        self._state = _State.RESET

    # ---- internals ---------------------------------------------------------------------------
    def _share_executables(self) -> None:
        segments = [s for s in self._segments if isinstance(s, GraphSegment)]
        graphs = [segment.graph for segment in segments]
        placed = executables.share(graphs, self._pool_memory.executables())  # type: ignore[arg-type]
        for segment, (shared, launch) in zip(segments, placed):
            segment.shared, segment.launch = shared, launch

    def _begin_graph(self) -> None:
        # A sharing capture keeps its graphs uninstantiated until it closes (see executables).
        graph = (
            torch.cuda.CUDAGraph(keep_graph=True)
            if self.share_executables
            else torch.cuda.CUDAGraph()
        )
        try:
            with GRAPH_LOCK:
                graph.capture_begin(pool=self.pool, capture_error_mode=self.capture_error_mode)
        except BaseException as exc:
            never_free(graph)
            _end_generators_capture(exc)  # the generators' prologue may have run already
            raise
        self._open_graph = graph

    def _end_graph(self) -> None:
        graph, self._open_graph = self._open_graph, None
        if graph is None:
            return
        try:
            recorded = end_graph(graph)
        except BaseException as exc:
            self._empty_graphs.append(graph)  # released with the rest on abort
            _note(exc, _POOL_LEFT_RECORDING.format(pool=self.pool))
            _end_generators_capture(exc)
            raise
        if recorded:
            self._segments.append(GraphSegment(graph))
        else:
            self._empty_graphs.append(graph)

    def _settle_empty_graphs(self) -> None:
        # With no real graph left, one empty graph stays as the pool's user so memory that
        # eager steps alias is not released; otherwise empty graphs are freed now.
        if not self._empty_graphs:
            return
        keep = 0 if self.num_graphs else 1
        with GRAPH_LOCK:
            for graph in self._empty_graphs[keep:]:
                graph.reset()
        del self._empty_graphs[keep:]

    def _resume_collector(self) -> None:
        if self._collector_paused:
            self._collector_paused = False
            collector.resume()

    def _close_streams(self) -> None:
        context, self._stream_context = self._stream_context, None
        if context is not None:
            context.__exit__(None, None, None)
            if self._stream != self._caller_stream:
                self._caller_stream.wait_stream(self._stream)

    def _release_all(self) -> None:
        for segment in self._segments:
            segment.release()
        with GRAPH_LOCK:
            for graph in self._empty_graphs:
                graph.reset()
        self._segments.clear()
        self._replay_head = None
        self._replay_plan.clear()
        self._empty_graphs.clear()
        self._eager_step_error = None
        self._pool_memory.detach()  # no graph of this capture keeps the pool in place now

    def _abort(self, exc: BaseException) -> None:
        """Leave no stream capturing and restore the caller's state; ``exc`` then propagates."""
        steps: list[tuple[str, Callable[[], None]]] = [
            ("ending the open graph segment", self._end_graph),
            ("restoring the caller's stream", self._close_streams),
            ("releasing the captured segments", self._release_all),
        ]
        try:
            for what, step in steps:
                try:
                    step()
                except Exception as secondary:
                    _note(exc, f"while aborting the capture, {what} also failed: {secondary!r}")
                    for note in getattr(secondary, "__notes__", ()):
                        _note(exc, note)
        finally:
            self._empty_graphs.clear()
            self._segments.clear()
            self._pool_memory.detach()
            self._resume_collector()
            thread_state.set_active_capture(None)
            _release_overlap(self)
            self._state = _State.FAILED
