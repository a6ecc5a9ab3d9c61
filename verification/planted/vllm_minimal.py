"""A minimal implementation of vLLM's breakable-cudagraph contract, written from vLLM's
documented behaviour, with bugs that can be switched on.

What vLLM documents (``vllm/compilation/breakable_cudagraph.py``): a decorated function run
inside an open capture segment ends the segment, runs eagerly, is recorded for replay and a
new segment begins; outside a capture, or inside an eager step, it is a plain call. Replay
runs the recorded graphs and eager calls in order and returns nothing: a break must write
into caller-provided buffers (the ``out-buffer`` contract, which this module leaves
undeclared so the harness's default applies). Like vLLM, an eager step holds its device
tensor arguments by non-owning references (vLLM's ``weak_ref_tensors``), so a capture does
not keep intermediates alive; the caller keeps its buffers alive. Unlike vLLM, it applies
around each break at replay the ambient state its region set around it at capture (the
library's ``ambient`` bookkeeping, borrowed), as a correct implementation must.
:func:`build` plants one of :data:`BUGS`, or holds the arguments strongly (``hold="strong"``,
a plain ``functools.partial``), which is correct but keeps memory alive.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import threading
from collections.abc import Callable
from types import SimpleNamespace, TracebackType
from typing import Any

import torch

from breakable_cudagraph import ambient, collector
from breakable_cudagraph.segments import call_within

BUGS: dict[str, str] = {
    "eager_before_graphs": "replay runs every eager step before every graph",
    "args_copied_at_capture": "an eager step replays on copies of its arguments taken at capture",
    "kwargs_dropped": "an eager step replays without its keyword arguments",
    "eager_before_feeding_graph": "an eager step is recorded before the graph that feeds it",
    "nested_call_crashes": "a decorated call inside a decorated call ends a closed segment",
    "enter_returns_none": (
        "__enter__ returns None, not the capture, so `with Capture() as capture:` binds None"
    ),
    "generator_forked_around_steps": (
        "replay runs each eager step inside torch.random.fork_rng, so a break's random draws "
        "never advance the device generator: every replay draws what the first did"
    ),
    "result_held_weakly": (
        "an eager step hands its caller a non-owning alias of the tensor it returned, whose "
        "memory is freed on return and handed to the next allocation"
    ),
    "alias_drops_strides": (
        "the non-owning alias of an eager step's tensor keeps its size and offset but not its "
        "strides, so a strided view (an output written every other element) is read as dense"
    ),
    "alias_default_dtype": (
        "the non-owning alias of an eager step's tensor is made in the default dtype, not the "
        "tensor's: a float16 or integer argument reaches the break reinterpreted as float32 "
        "(and one whose memory is smaller than a float32 cannot be aliased at all)"
    ),
    "alias_offset_twice": (
        "the non-owning alias of an eager step's tensor starts at the tensor's own address and "
        "then adds its storage offset again: a view that does not start its storage reaches "
        "the break shifted"
    ),
    "replay_swallows_break_errors": (
        "replay catches whatever an eager step raises and goes on, so a break that fails at "
        "replay never reaches its caller: the outputs are silently stale"
    ),
    "segments_shared_by_class": (
        "the record of segments is a class attribute, one list for every capture object: each "
        "replay also replays every earlier capture's graphs and eager steps"
    ),
}
# The check that finds a bug where it is not the fuzzer (each other bug is the fuzzer's).
CHECKS: dict[str, str] = {"result_held_weakly": "pool", "replay_swallows_break_errors": "faults"}

_active = threading.local()


def _weak_ref(value: Any, bugs: frozenset[str] = frozenset()) -> Any:
    """A tensor over the same device memory that does not own it (vLLM's weak_ref_tensor).

    Conjugate and negative views and tensor subclasses are kept as they are: a tensor rebuilt
    from their memory would lose the bit or the subclass (the pool check's
    ``arguments_as_given_problem``; vLLM's ``from_blob`` rebuild has not been checked for it).
    The tensor's Python attributes are copied onto it (vLLM's weak_ref_tensor drops them)."""
    if not isinstance(value, torch.Tensor) or not value.is_cuda:
        return value
    if value.is_conj() or value.is_neg() or type(value) is not torch.Tensor:
        return value
    storage = value.untyped_storage()
    start = value.data_ptr() if "alias_offset_twice" in bugs else storage.data_ptr()
    alias = torch._C._construct_storage_from_data_pointer(start, value.device, storage.nbytes())
    dtype = torch.get_default_dtype() if "alias_default_dtype" in bugs else value.dtype
    empty = torch.empty((), dtype=dtype, device=value.device)
    dense = "alias_drops_strides" in bugs
    stride = torch.empty(value.size(), device="meta").stride() if dense else value.stride()
    weak = empty.set_(alias, value.storage_offset(), value.size(), stride)
    weak.__dict__.update(value.__dict__)
    return weak


def _weak_refs(tree: Any, bugs: frozenset[str] = frozenset()) -> Any:
    """``tree`` with device tensors replaced by :func:`_weak_ref`; a list, tuple or dict none
    of whose items changed is kept as itself, since the runner may rewrite it in place before
    a replay (a list of sequence lengths) and the break must see that at replay."""
    if isinstance(tree, (list, tuple)):
        items = [_weak_refs(item, bugs) for item in tree]
        if all(a is b for a, b in zip(items, tree)):
            return tree
        if isinstance(tree, tuple) and hasattr(type(tree), "_fields"):
            return type(tree)(*items)
        return type(tree)(items)
    if isinstance(tree, dict):
        values = {key: _weak_refs(value, bugs) for key, value in tree.items()}
        if all(values[key] is tree[key] for key in tree):
            return tree
        rebuilt = copy.copy(tree)
        rebuilt.update(values)
        return rebuilt
    return _weak_ref(tree, bugs)


class _Capture:
    """One breakable capture; ``bugs`` and ``hold`` are set per variant by :func:`build`."""

    bugs: frozenset[str] = frozenset()
    hold: str = "weak"

    def __init__(self, pool: Any = None) -> None:
        # One pool for every segment, so memory handed from segment to segment stays put.
        self.pool = torch.cuda.graph_pool_handle() if pool is None else pool
        self.segments: list[tuple[str, Callable[[], Any]]] = []
        if "segments_shared_by_class" in self.bugs:  # one list per variant's class
            self.segments = vars(type(self)).get("_every_segment") or []
            type(self)._every_segment = self.segments  # type: ignore[attr-defined]
        self._graph: torch.cuda.CUDAGraph | None = None
        self._step_error: BaseException | None = None
        self._entry: Any = None  # the ambient state the capture was entered under

    @staticmethod
    def current() -> _Capture | None:
        return getattr(_active, "capture", None)

    @property
    def capturing(self) -> bool:
        return self._graph is not None

    def __enter__(self) -> _Capture:
        if _Capture.current() is not None:
            raise RuntimeError("a breakable capture is already open in this thread")
        # The collector must not free an earlier graph mid-capture (the faults check); an
        # engine may instead keep it off around all its captures. This stand-in borrows the
        # library's counted pause rather than writing a second one.
        self._pause_collector()
        self._entry = ambient.record()
        try:
            self._open_segment()  # first: a capture_begin that raises leaves nothing active
        except BaseException:
            self._resume_collector()
            raise
        _active.capture = self
        return None if "enter_returns_none" in self.bugs else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self.capturing:
                self._close_segment()
            if exc is None and self._step_error is not None:
                raise RuntimeError(
                    "an eager step raised during capture and was caught inside the block; "
                    "the capture is incomplete"
                ) from self._step_error
        finally:
            _active.capture = None
            self._resume_collector()

    # The collector guard, apart so that a variant can guard it otherwise.
    def _pause_collector(self) -> None:
        collector.pause()

    def _resume_collector(self) -> None:
        collector.resume()

    def _open_segment(self) -> None:
        graph = torch.cuda.CUDAGraph()
        # torch's default mode, global, as vLLM 0.33.0 captures (no capture_error_mode passed):
        # another thread's unsafe call during the capture is refused by CUDA.
        graph.capture_begin(pool=self.pool)
        self._graph = graph

    def _close_segment(self) -> None:
        assert self._graph is not None, "no capture segment is open"
        graph, self._graph = self._graph, None
        graph.capture_end()
        self.segments.append(("graph", graph.replay))

    def add_eager(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Runs ``fn`` now, between two segments, and again at every replay; returns the
        capture-time result, which replay does not refresh."""
        if _Capture.current() is not self:
            # vLLM leaves this to torch's capture_end, which checks the current stream; this
            # stand-in forgets a segment before ending it, so it refuses up front.
            raise RuntimeError("add_eager needs this capture open in this thread")
        replay_args, replay_kwargs = args, kwargs
        if "args_copied_at_capture" in self.bugs:
            replay_args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
        if "kwargs_dropped" in self.bugs:
            replay_kwargs = {}
        called_under = ambient.read()
        self._close_segment()
        if self.hold == "weak":  # between segments: nothing of this lands in a graph
            replay_args, replay_kwargs = _weak_refs((replay_args, replay_kwargs), self.bugs)
        step = ("eager", functools.partial(fn, *replay_args, **replay_kwargs))
        changed = ambient.delta(called_under, self._entry)
        if changed is not None:  # the region's own with-blocks, applied again at replay
            step = ("eager", functools.partial(call_within, changed, step[1]))
        if "eager_before_feeding_graph" in self.bugs:
            self.segments.insert(len(self.segments) - 1, step)
        else:
            self.segments.append(step)
        try:
            result = fn(*args, **kwargs)
        except BaseException as error:
            # Capture stops here; a caller that catches this inside the block would get a
            # capture cut short, so __exit__ refuses it (the faults check's caught break).
            self._step_error = error
            raise
        self._open_segment()
        return _weak_refs(result) if "result_held_weakly" in self.bugs else result

    def replay(self) -> None:
        order = self.segments
        if "eager_before_graphs" in self.bugs:
            order = sorted(order, key=lambda segment: segment[0] != "eager")
        for kind, run in order:
            if kind == "eager" and "generator_forked_around_steps" in self.bugs:
                device = torch.cuda.current_device()
                with torch.random.fork_rng(devices=[device], device_type="cuda"):
                    run()
            elif kind == "eager" and "replay_swallows_break_errors" in self.bugs:
                with contextlib.suppress(Exception):
                    run()
            else:
                run()


def _decorator(bugs: frozenset[str]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def eager_break_during_capture(fn: Callable[..., Any]) -> Callable[..., Any]:
        """Makes ``fn`` an eager break while a capture segment is open."""

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            capture = _Capture.current()
            inline = capture is None or not capture.capturing
            if inline and not (capture is not None and "nested_call_crashes" in bugs):
                return fn(*args, **kwargs)
            assert capture is not None
            return capture.add_eager(fn, *args, **kwargs)

        return wrapper

    return eager_break_during_capture


def build(bug: str | tuple[str, ...] | None = None, hold: str = "weak") -> SimpleNamespace:
    """A target with ``bug`` planted (``None``: the correct variant; a tuple: each of those
    bugs at once), holding its eager steps' arguments ``"weak"`` (as vLLM) or ``"strong"``."""
    named = (bug,) if isinstance(bug, str) else tuple(bug or ())
    for each in named:
        if each not in BUGS:
            raise ValueError(f"unknown planted bug {each!r}; choose one of {', '.join(BUGS)}")
    if hold not in ("weak", "strong"):
        raise ValueError(f"hold must be 'weak' or 'strong', not {hold!r}")
    bugs = frozenset(named)
    capture = type("BreakableCUDAGraphCapture", (_Capture,), {"bugs": bugs, "hold": hold})
    return SimpleNamespace(
        __name__=f"vllm_minimal[{bug or 'clean'}, {hold}]",
        BreakableCUDAGraphCapture=capture,
        eager_break_during_capture=_decorator(bugs),
        REPRODUCER_IMPORT=(
            f"from verification.planted.vllm_minimal import build\ntarget = build({bug!r}, hold={hold!r})"
        ),
    )


# The clean variant as a module: ``--target verification.planted.vllm_minimal``.
BreakableCUDAGraphCapture = _Capture
eager_break_during_capture = _decorator(frozenset())
