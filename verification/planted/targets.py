"""A minimal breakable capture written against torch.cuda, with bugs that can be switched on.

:func:`build` returns a target object (the harness's target API) whose capture keeps a
list of segments: one ``torch.cuda.CUDAGraph`` per stretch of captured work, all sharing
one pool, and an eager record per break. With no bug it is correct; each name in
:data:`BUGS` plants one defect the fuzzer must find.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace, TracebackType
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

# The state a break's region set around it, as the library records and applies it: a second
# copy of that bookkeeping here would only be a second place for it to go wrong.
from breakable_cudagraph import ambient

BUGS: dict[str, str] = {
    "eager_not_recorded": "a break runs at capture but is not kept for replay",
    "eager_run_twice": "each break runs twice at replay",
    "eager_reordered": "breaks replay in reverse order",
    "args_frozen": "a break replays on clones of its capture-time arguments",
    "kwargs_lost": "a break replays without its keyword arguments",
    "last_segment_dropped": "the graph after the last break is never replayed",
    "segment_after_break_skipped": "the graph right after the first break is not replayed",
    "output_not_copied_back": "a tensor returned by a break is not refreshed at replay",
    "nested_break_recorded_twice": "a break called inside a break is recorded on its own too",
    "eager_only_first_replay": "breaks run only on the first replay",
    "first_segment_dropped": "the graph before the first break is never replayed",
    "graphs_reversed": "graph segments replay in reverse order",
    # Engine-shaped programs (one decorated op called at many steps, host values rewritten in
    # place between replays, a break that returns its argument on some calls) find these.
    "record_keyed_by_function": (
        "breaks are recorded per function, so a later call of a shared op overwrites the "
        "arguments of its earlier calls"
    ),
    "host_args_snapshot": "a break's non-tensor arguments are deep-copied at capture",
    "args_rebuilt_by_pytree": (
        "a break's arguments are rebuilt with pytree's tree_map at capture, which copies "
        "every list, so a list the runner rewrites in place is stale at replay"
    ),
    "result_copied_into_argument": (
        "a new result at replay is copied into the argument a break returned at capture"
    ),
}

# The bugs only engine-shaped programs reach (tests/harness/test_engine_programs.py).
ENGINE_BUGS: tuple[str, ...] = (
    "record_keyed_by_function",
    "host_args_snapshot",
    "args_rebuilt_by_pytree",
    "result_copied_into_argument",
)


@dataclass
class _Eager:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    result: Any
    # Storage addresses of its tensor arguments: whether a result aliases one must not change.
    memory: frozenset[int] = frozenset()
    # What the region's own with-blocks set around the call (the library's ambient delta).
    ambient: Any = None


def _storages(tree: Any) -> frozenset[int]:
    leaves, _ = tree_flatten(tree)
    return frozenset(t.untyped_storage().data_ptr() for t in leaves if isinstance(t, torch.Tensor))


def _keep_tensors(tree: Any) -> dict[int, Any]:
    """A deepcopy memo that keeps every tensor in ``tree`` (containers, dataclasses) as itself."""
    found: dict[int, Any] = {}
    if isinstance(tree, torch.Tensor):
        found[id(tree)] = tree
    elif isinstance(tree, (list, tuple)):
        for value in tree:
            found.update(_keep_tensors(value))
    elif isinstance(tree, dict):
        for value in tree.values():
            found.update(_keep_tensors(value))
    elif hasattr(tree, "__dataclass_fields__"):
        for name in tree.__dataclass_fields__:
            found.update(_keep_tensors(getattr(tree, name)))
    return found


class _Capture:
    """The capture; ``bugs`` is set per planted variant by :func:`build`."""

    bugs: frozenset[str] = frozenset()

    def __init__(self, pool: Any = None, *, stream: Any = None) -> None:
        self.pool = torch.cuda.graph_pool_handle() if pool is None else pool
        self.stream = stream
        self.segments: list[Any] = []
        self.by_function: dict[Any, _Eager] = {}
        self.replays = 0
        self._context: Any = None
        self._entry: Any = None

    def _begin(self) -> None:
        # capture_begin on the caller's (non-default) stream: torch.cuda.graph would also
        # run gc.collect per segment, which dominates the fuzzer's time.
        graph = torch.cuda.CUDAGraph()
        self.segments.append(graph)
        graph.capture_begin(pool=self.pool)
        self._context = graph

    def _end(self) -> None:
        graph, self._context = self._context, None
        graph.capture_end()

    def __enter__(self) -> _Capture:
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("nested capture: the current stream is already capturing")
        _ACTIVE.append(self)
        self._entry = ambient.record()
        try:
            self._begin()
        except BaseException:
            # Left in _ACTIVE, a capture whose begin failed (a nested one, on a GPU) would be
            # the "current" capture of every later test in the process, and its graph would
            # live until the interpreter exits.
            _ACTIVE.remove(self)
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _ACTIVE.remove(self)
        if self._context is not None:
            self._end()

    def add_eager(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        called_under = ambient.read()
        self._end()
        result = fn(*args, **kwargs)
        kept_args = (
            tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
            if "args_frozen" in self.bugs
            else args
        )
        kept_kwargs = {} if "kwargs_lost" in self.bugs else kwargs
        if "host_args_snapshot" in self.bugs:
            # Tensors stay shared; lists, ints and the objects holding them are frozen.
            kept_args = copy.deepcopy(kept_args, _keep_tensors(kept_args))
        if "args_rebuilt_by_pytree" in self.bugs:
            kept_args = tree_map(lambda leaf: leaf, kept_args)
        eager = _Eager(fn, kept_args, kept_kwargs, result, _storages((args, kwargs)))
        eager.ambient = ambient.delta(called_under, self._entry)
        if "record_keyed_by_function" in self.bugs:
            earlier = self.by_function.setdefault(fn, eager)
            earlier.args, earlier.kwargs = eager.args, eager.kwargs
            eager = earlier
        if "eager_not_recorded" not in self.bugs:
            self.segments.append(eager)
        self._begin()
        return result

    def _schedule(self) -> list[Any]:
        segments = list(self.segments)
        graphs = [i for i, s in enumerate(segments) if not isinstance(s, _Eager)]
        eagers = [i for i, s in enumerate(segments) if isinstance(s, _Eager)]
        if "eager_reordered" in self.bugs:
            for i, j in zip(eagers, reversed(eagers)):
                segments[i] = self.segments[j]
        if "graphs_reversed" in self.bugs:
            for i, j in zip(graphs, reversed(graphs)):
                segments[i] = self.segments[j]
        skipped: set[int] = set()
        if "last_segment_dropped" in self.bugs and eagers:
            skipped.add(graphs[-1])
        if "first_segment_dropped" in self.bugs and eagers:
            skipped.add(graphs[0])
        if "segment_after_break_skipped" in self.bugs and eagers:
            skipped.add(eagers[0] + 1)
        return [s for i, s in enumerate(segments) if i not in skipped]

    def _run_eager(self, eager: _Eager) -> None:
        if "eager_only_first_replay" in self.bugs and self.replays > 0:
            return
        for _ in range(2 if "eager_run_twice" in self.bugs else 1):
            undo = None if eager.ambient is None else ambient.enter(eager.ambient)
            try:
                result = eager.fn(*eager.args, **eager.kwargs)
            finally:
                if undo is not None:
                    ambient.leave(undo)
            if "output_not_copied_back" in self.bugs:
                continue
            # Tensors returned (also inside lists and dicts) land in the capture-time ones.
            fresh, _ = tree_flatten(result)
            kept, _ = tree_flatten(eager.result)
            for new, old in zip(fresh, kept):
                if not isinstance(old, torch.Tensor) or new.data_ptr() == old.data_ptr():
                    continue
                # A result that aliased an argument at capture and not now (or the reverse)
                # cannot replay as eager: the graphs read both through one memory.
                was = old.untyped_storage().data_ptr() in eager.memory
                now = new.untyped_storage().data_ptr() in eager.memory
                if (was or now) and "result_copied_into_argument" not in self.bugs:
                    raise RuntimeError(
                        f"break {getattr(eager.fn, '__name__', eager.fn)} returned its argument "
                        "on one call and a "
                        "new tensor on another"
                    )
                if old.is_inference() and not torch.is_inference_mode_enabled():
                    with torch.inference_mode():  # a result its region made in that mode
                        old.copy_(new)
                else:
                    old.copy_(new)

    def replay(self) -> None:
        for segment in self._schedule():
            if isinstance(segment, _Eager):
                self._run_eager(segment)
            else:
                segment.replay()
        self.replays += 1

    @staticmethod
    def current() -> _Capture | None:
        return _ACTIVE[-1] if _ACTIVE else None


_ACTIVE: list[_Capture] = []
_IN_BREAK: list[bool] = []


def _decorator(bugs: frozenset[str]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def eager_break_during_capture(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            capture = _Capture.current()
            if capture is None:
                return fn(*args, **kwargs)
            if capture._context is None:
                # Called inside another break, which replays it already.
                if "nested_break_recorded_twice" in bugs:
                    capture.segments.append(_Eager(fn, args, kwargs, None))
                return fn(*args, **kwargs)
            return capture.add_eager(fn, *args, **kwargs)

        return wrapper

    return eager_break_during_capture


def build(bug: str | None = None) -> SimpleNamespace:
    """A target with ``bug`` planted (``None``: the correct variant)."""
    if bug is not None and bug not in BUGS:
        raise ValueError(f"unknown planted bug {bug!r}; choose one of {', '.join(BUGS)}")
    bugs = frozenset({bug} if bug else ())
    return SimpleNamespace(
        __name__=f"planted[{bug or 'clean'}]",
        BreakableCUDAGraphCapture=type("BreakableCUDAGraphCapture", (_Capture,), {"bugs": bugs}),
        eager_break_during_capture=_decorator(bugs),
        REPRODUCER_IMPORT=f"from verification.planted.targets import build\ntarget = build({bug!r})",
        # It copies each replay's result into the tensor the break returned at capture.
        BREAK_CONTRACT="returns",
    )
