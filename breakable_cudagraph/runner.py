"""``BreakableGraphRunner``: a callable that captures ``fn`` once per input signature and replays.

A signature is the tensors' shapes, dtypes, devices and strides plus every non-tensor argument
by value. On a new signature the runner clones the inputs into static buffers it owns, warms
``fn`` up eagerly on the capture stream, captures it with :class:`BreakableCUDAGraphCapture`
(one pool for all signatures) and replays; later calls copy inputs into the buffers, replay, and
return the same static output objects. With graphs disabled it runs ``fn`` eagerly on the same
buffers each call and copies the results into the same output objects.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch

from .capture import BreakableCUDAGraphCapture
from .segments import copy_result_back
from .switch import graphs_disabled
from .trees import children, map_tensors, tensor_leaves


def input_signature(tree: Any) -> Hashable:
    """A hashable key describing ``tree``: tensor metadata, containers, other values by value."""
    if isinstance(tree, torch.Tensor):
        return ("tensor", tuple(tree.shape), tree.dtype, tree.device, tuple(tree.stride()))
    kids = children(tree)
    if kids is not None:
        keys = tuple(tree.keys()) if isinstance(tree, dict) else None
        return (type(tree), keys, tuple(input_signature(kid) for kid in kids))
    try:
        hash(tree)
    except TypeError:
        raise TypeError(
            "BreakableGraphRunner keys captures on non-tensor arguments by value, and "
            f"{type(tree).__name__} is unhashable; pass a tensor, a hashable value, or a "
            "tuple/list/dict/dataclass of those"
        ) from None
    return (type(tree), tree)


@dataclass
class _Entry:
    """Everything one signature owns: static inputs, static outputs, and its capture."""

    static_inputs: tuple[tuple[Any, ...], dict[str, Any]]
    outputs: Any
    capture: BreakableCUDAGraphCapture
    addresses: list[int]


class BreakableGraphRunner:
    """Wrap ``fn`` so each new input signature is captured once and replayed afterwards.

    ``warmup``: eager runs on the capture stream before each capture. ``pool``: memory pool
    shared by all captures (default: a new one). ``debug=True`` checks after every call that no
    static buffer moved. ``enabled``: as for :class:`BreakableCUDAGraphCapture`.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        warmup: int = 1,
        pool: Any = None,
        debug: bool = False,
        enabled: bool | None = None,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"BreakableGraphRunner wraps a callable, got {type(fn).__name__}")
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
            raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
        self.fn = fn
        self.warmup = warmup
        self.pool = pool if pool is not None else torch.cuda.graph_pool_handle()
        self.debug = debug
        self.enabled = enabled
        self._entries: dict[Hashable, _Entry] = {}

    @property
    def captures(self) -> list[BreakableCUDAGraphCapture]:
        """One capture per signature seen so far (eager ones included), in order."""
        return [entry.capture for entry in self._entries.values()]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        eager = graphs_disabled(self.enabled)
        key = (eager, input_signature((args, kwargs)))
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = self._first_call(args, kwargs, eager)
        else:
            self._copy_inputs(entry, (args, kwargs))
            if eager:
                copy_result_back(
                    getattr(self.fn, "__qualname__", repr(self.fn)),
                    entry.outputs,
                    self.fn(*entry.static_inputs[0], **entry.static_inputs[1]),
                )
            else:
                entry.capture.replay()
        if self.debug:
            self._check_addresses(entry)
        return entry.outputs

    def _first_call(self, args: tuple[Any, ...], kwargs: dict[str, Any], eager: bool) -> _Entry:
        static_args, static_kwargs = map_tensors((args, kwargs), lambda t: t.detach().clone())
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(self.warmup):
                self.fn(*static_args, **static_kwargs)
        torch.cuda.current_stream().wait_stream(stream)
        capture = BreakableCUDAGraphCapture(pool=self.pool, stream=stream, enabled=not eager)
        with capture:
            outputs = self.fn(*static_args, **static_kwargs)
        if not eager:
            # Capture only records work: the outputs hold nothing valid until a replay.
            capture.replay()
        static_inputs = (static_args, static_kwargs)
        addresses = [t.data_ptr() for t in tensor_leaves((static_inputs, outputs))]
        return _Entry(static_inputs, outputs, capture, addresses)

    @staticmethod
    def _copy_inputs(entry: _Entry, inputs: Any) -> None:
        for static, new in zip(tensor_leaves(entry.static_inputs), tensor_leaves(inputs)):
            if static.data_ptr() != new.data_ptr():
                static.copy_(new)

    @staticmethod
    def _check_addresses(entry: _Entry) -> None:
        now = [t.data_ptr() for t in tensor_leaves((entry.static_inputs, entry.outputs))]
        for index, (then, current) in enumerate(zip(entry.addresses, now)):
            if then != current:
                raise RuntimeError(
                    f"BreakableGraphRunner(debug=True): static tensor {index} moved from "
                    f"{then:#x} to {current:#x}; the graphs still use the old address, so never "
                    "resize_/set_ the runner's inputs or outputs"
                )
