"""The two kinds of segment a breakable capture records, and how each is ended and replayed.

``GraphSegment`` is one non-empty ``torch.cuda.CUDAGraph``. ``EagerStep`` is a Python call with
its held arguments and the capture-time result that later graphs read: at replay it runs the call
once on the current stream and copies each returned tensor into that capture-time result, which
is exact only while each returned tensor aliases the break's arguments at replay exactly when it
did at capture (``copy_result_back`` refuses the rest).
``end_graph`` ends a graph's capture and says whether it recorded anything, swallowing only
torch's empty-graph warning so no empty graph or its warning ever reaches the user.
"""

from __future__ import annotations

import ctypes
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

import torch

from . import ambient
from .ambient import Delta
from .thread_state import enter_eager_step, exit_eager_step
from .trees import tensor_leaves

_EMPTY_GRAPH_WARNING = "The CUDA Graph is empty"
# Swapping the warnings module's filters is process-global; the lock keeps two threads from
# interleaving their swaps and losing each other's filters.
_WARNINGS_LOCK = threading.Lock()
# Held around every begin, end and reset of a graph this library makes. torch registers each
# graph with the CUDA generators at capture_begin and unregisters it at reset, and those
# tables are not safe from two threads at once: two threads capturing side by side, one of
# them recovering from a capture CUDA invalidated, crashed the process by SIGSEGV in reset on
# the H200 (torch 2.11). The captures themselves still run side by side.
GRAPH_LOCK = threading.RLock()
# torch 2.11 aborts the process whenever it frees a CUDAGraph whose capture_begin raised
# ("The graph should be registered to the state", from ~CUDAGraph; H200): while the error
# propagates, later at a collection, or at interpreter exit. Such a graph is kept alive for the
# life of the process, an extra reference keeping it from the interpreter's teardown too.
_NEVER_FREED: list[torch.cuda.CUDAGraph] = []


def never_free(graph: torch.cuda.CUDAGraph) -> None:
    """Keeps ``graph``, whose ``capture_begin`` raised, from ever being freed."""
    _NEVER_FREED.append(graph)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(graph))


# What ``catch_warnings(record=True)`` plus ``simplefilter("always")`` leaves in effect: one
# filter that lets every warning through to the recorder.
_ALWAYS = ("always", None, Warning, None, 0)
# The hooks catch_warnings itself swaps. Where they are missing, or filters are per context
# (Python 3.14's context-aware warnings), catch_warnings is used instead.
_SWAP_HOOKS = (
    "filters",
    "_filters_mutated",
    "showwarning",
    "_showwarnmsg_impl",
    "_showwarning_orig",
)
_CAN_SWAP = all(hasattr(warnings, name) for name in _SWAP_HOOKS) and not getattr(
    sys.flags, "context_aware_warnings", False
)


def _capture_end_recording(graph: torch.cuda.CUDAGraph) -> list[warnings.WarningMessage]:
    """``graph.capture_end()`` with every warning it raises recorded instead of shown.

    What ``catch_warnings(record=True)`` and ``simplefilter("always")`` do, less their copy of
    the caller's filters and second filter mutation: every segment pays this at capture
    The caller holds ``_WARNINGS_LOCK``.
    """
    if not _CAN_SWAP:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            graph.capture_end()
        return caught
    caught: list[warnings.WarningMessage] = []
    module = warnings
    filters, showwarning, impl = module.filters, module.showwarning, module._showwarnmsg_impl
    # A showwarning the caller replaced would be called instead of the recorder; the usual
    # one is left in place (one swap less per segment).
    replaced = showwarning is not module._showwarning_orig
    module.filters = [_ALWAYS]
    module._filters_mutated()
    module._showwarnmsg_impl = caught.append
    if replaced:
        module.showwarning = module._showwarning_orig
    try:
        graph.capture_end()
    finally:
        module.filters = filters
        module._filters_mutated()
        if replaced:
            module.showwarning = showwarning
        module._showwarnmsg_impl = impl
    return caught


def end_graph(graph: torch.cuda.CUDAGraph) -> bool:
    """End ``graph``'s capture; True if it recorded work, False if it is empty."""
    with GRAPH_LOCK, _WARNINGS_LOCK:
        caught = _capture_end_recording(graph)
    if not caught:
        return True
    empty = any(_EMPTY_GRAPH_WARNING in str(w.message) for w in caught)
    for w in caught:
        if _EMPTY_GRAPH_WARNING not in str(w.message):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    return not empty


def _released() -> None:
    raise RuntimeError("graph segment was released; capture again")


class GraphSegment:
    """One captured, non-empty CUDA graph of the chain. ``launch`` runs it: the graph's own
    ``replay``, or a launch through the executable it shares (``shared``, see
    :mod:`~breakable_cudagraph.executables`)."""

    # Slots: one is made per break at capture, and a slotted object is quicker to make.
    __slots__ = ("graph", "launch", "shared")

    def __init__(self, graph: torch.cuda.CUDAGraph) -> None:
        self.graph: torch.cuda.CUDAGraph | None = graph
        self.launch: Callable[[], None] = graph.replay
        self.shared: Any = None

    def replay(self) -> None:
        self.launch()

    def release(self) -> None:
        graph, self.graph = self.graph, None
        shared, self.shared = self.shared, None
        self.launch = _released
        if shared is not None and graph is not None:
            shared.release(graph)
        elif graph is not None:
            with GRAPH_LOCK:
                graph.reset()
        # The graph object itself must go too: until it is destroyed it stays registered with
        # the CUDA generator, which keeps its graph seed and offset tensors (a 2 MiB segment
        # on the capture's stream) alive: H200, torch 2.11, when the caller holds
        # capture.segments after reset().

    def __repr__(self) -> str:
        return "GraphSegment()"


class EagerStep:
    """One eager break: ``call()`` runs the user function on the held arguments."""

    __slots__ = ("ambient", "argument_memory", "call", "name", "returns_tensors", "static_result")

    def __init__(
        self,
        name: str,
        call: Callable[[], Any],
        static_result: Any,
        argument_memory: frozenset[int] = frozenset(),
        ambient: Delta | None = None,
    ) -> None:
        self.name = name
        self.call: Callable[[], Any] | None = call
        self.static_result = static_result
        # Storage addresses of the tensor arguments (the same at every replay: they are held).
        self.argument_memory = argument_memory
        # What the captured region's own ``with`` blocks set around the call (autocast, say),
        # applied again around it at every replay; None for most breaks.
        self.ambient = ambient
        # Most breaks write into buffers and return None; for them replay skips walking the
        # result, which would cost more than the call itself.
        self.returns_tensors = static_result is not None and bool(tensor_leaves(static_result))

    def replay(self) -> None:
        call = self.call
        if call is None:
            raise RuntimeError(f"eager step {self.name} was released; capture again")
        enter_eager_step()
        try:
            result = call() if self.ambient is None else call_within(self.ambient, call)
        finally:
            exit_eager_step()
        if result is not None or self.returns_tensors:
            copy_result_back(self.name, self.static_result, result, self.argument_memory)

    def release(self) -> None:
        self.call = None
        self.static_result = None
        self.returns_tensors = False

    def __repr__(self) -> str:
        return f"EagerStep({self.name})"


def call_within(changed: Delta, call: Callable[[], Any]) -> Any:
    """``call()`` with ``changed`` applied to the ambient state around it."""
    undo = ambient.enter(changed)
    try:
        return call()
    finally:
        ambient.leave(undo)


def argument_storages(tree: Any) -> frozenset[int]:
    """The storage addresses of the tensors in ``tree`` (a break's arguments)."""
    # Empty storages all sit at address 0 and alias nothing.
    addresses = (t.untyped_storage().data_ptr() for t in tensor_leaves(tree))
    return frozenset(address for address in addresses if address)


def copy_result_back(
    name: str, static_result: Any, result: Any, argument_memory: frozenset[int] = frozenset()
) -> None:
    """Copy the tensors of a replay-time result into the capture-time result later graphs read.

    Exact only while each returned tensor is an argument (or a view of one) at replay exactly
    when it was at capture: the graphs read a capture-time argument and that result through the
    same memory, which a fresh tensor at replay cannot split again, and a fresh capture-time
    result is a copy that later writes to the argument would not reach. Anything else raises.
    """
    static, fresh = tensor_leaves(static_result), tensor_leaves(result)
    if len(static) != len(fresh):
        raise RuntimeError(
            f"eager step {name} returned {len(fresh)} tensors at replay but {len(static)} at "
            "capture; a break must return the same structure every time"
        )
    for index, (old, new) in enumerate(zip(static, fresh)):
        if old.shape != new.shape or old.dtype != new.dtype:
            raise RuntimeError(
                f"eager step {name} returned tensor {index} as {tuple(new.shape)} {new.dtype} at "
                f"replay but {tuple(old.shape)} {old.dtype} at capture; a break must return "
                "tensors of the same shape and dtype every time"
            )
        same_memory = (
            old.data_ptr() == new.data_ptr()
            and old.stride() == new.stride()
            and old.device == new.device
        )
        if same_memory:
            continue
        was_argument = old.untyped_storage().data_ptr() in argument_memory
        is_argument = new.untyped_storage().data_ptr() in argument_memory
        if was_argument or is_argument:
            what = {True: "(a view of) an argument", False: "a new tensor"}
            raise RuntimeError(
                f"eager step {name} returned {what[is_argument]} as tensor {index} at replay but "
                f"{what[was_argument] if was_argument != is_argument else 'another view'} at "
                "capture; the graphs read that result through its capture-time memory, so "
                "replay cannot match eager: return the argument every time, or a new tensor "
                "every time (x.clone() when there is nothing to do)"
            )
        if old.is_inference() and not torch.is_inference_mode_enabled():
            # A result made under the region's inference_mode block is an inference tensor,
            # which only inference mode may update in place.
            with torch.inference_mode():
                old.copy_(new)
        else:
            old.copy_(new)
