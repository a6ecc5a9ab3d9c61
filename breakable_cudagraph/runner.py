"""``BreakableGraphRunner``: a callable that captures ``fn`` once per input signature and replays.

A signature is the tensors' shapes, dtypes, devices and strides plus every non-tensor argument
by value. The runner keeps eager semantics for the caller's tensors: every run of ``fn`` starts
from the caller's values, an input ``fn`` writes is written back to the caller's tensor after
each call, and an output that is an input (or a view of one) is returned as the caller's tensor
(or the same view of it); other outputs are static tensors the runner owns, the same objects on
every call of a signature. With graphs disabled it runs ``fn`` eagerly on the same buffers each
call and copies the results into the same output objects.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch

from .arguments import PoolMemory
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


def _static_copy(tensor: torch.Tensor) -> torch.Tensor:
    """The runner's buffer for ``tensor``: its values, laid out with its very strides, so that
    a view ``fn`` returns of the buffer maps onto the same view of the caller's tensor.

    A tensor whose elements share memory (an ``expand``) cannot be written element by element,
    so it gets a contiguous buffer (``fn`` cannot write it in place either). Created outside
    inference mode: inference tensors keep no version counter, which finds ``fn``'s writes.
    """
    with torch.inference_mode(False):
        buffer = torch.empty_strided(
            tensor.shape, tensor.stride(), dtype=tensor.dtype, device=tensor.device
        )
        try:
            return buffer.copy_(tensor.detach())
        except RuntimeError:  # more than one element of the buffer refers to one location
            return tensor.detach().clone(memory_format=torch.contiguous_format)


@dataclass
class _Entry:
    """Everything one signature owns: static inputs, static outputs, and its capture.

    ``written``: the input leaves the captured run wrote (found by their version counters).
    ``aliases``: for each output leaf that shares memory with an input leaf, that input's index.
    """

    static_inputs: tuple[tuple[Any, ...], dict[str, Any]]
    outputs: Any
    capture: BreakableCUDAGraphCapture
    addresses: list[int]
    written: frozenset[int]
    aliases: dict[int, int]


class BreakableGraphRunner:
    """Wrap ``fn`` so each new input signature is captured once and replayed afterwards.

    ``warmup``: eager runs on the capture stream before each capture. ``pool``: memory pool
    shared by all captures (default: a new one). ``debug=True`` checks after every call that no
    static buffer moved. ``enabled``: as for :class:`BreakableCUDAGraphCapture`.

    ``fn`` may write its tensor inputs (in place or through ``out=``), as eager code does: each
    warm-up run, the capture and the first replay start from the caller's values, so the
    warm-up's writes never reach the result, and after every call each input ``fn`` wrote holds
    what eager would have left in it: the runner copies its buffer back into the caller's
    tensor, for the inputs written and only those. Writes are found by torch's version
    counters, at the capture and at each replay (an eager break may write at replay only):
    they cost nothing and cannot go stale as a declared list of written inputs could, but a
    write torch does not see (a custom kernel writing through a raw pointer) is not copied back.
    torch's cudagraph trees instead skip graphs for a function that mutates an input coming from
    eager (parameters, buffers and their own earlier outputs excepted); writing back is as exact
    as eager and keeps the graphs, at one copy per written input per call.

    An output that is an input is returned as the caller's tensor, and one that views an input
    as the same view of the caller's tensor, as eager returns them (a view of an input whose
    elements overlap, an ``expand``, is returned as a view of the runner's buffer). Every other
    output is a static tensor: a repeated signature returns the same objects, overwritten.
    Inputs that share memory with each other are copied into separate buffers, so a function
    that writes one and reads the other sees what eager would not.
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
        inputs = tensor_leaves((args, kwargs))
        key = (eager, input_signature((args, kwargs)))
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = self._first_call(args, kwargs, inputs, eager)
        else:
            static = tensor_leaves(entry.static_inputs)
            self._copy_inputs(entry, (args, kwargs))
            if eager:
                fresh, written = _tracking_writes(static, self._run_on(entry.static_inputs))
                copy_result_back(
                    getattr(self.fn, "__qualname__", repr(self.fn)),
                    *_writable_parts(entry.outputs, fresh),
                )
            else:
                _, written = _tracking_writes(static, entry.capture.replay)
                written |= entry.written
            _write_back(static, inputs, written)
        if self.debug:
            self._check_addresses(entry)
        return _outputs_for(entry.outputs, entry.aliases, entry.static_inputs, inputs)

    def _run_on(self, static_inputs: tuple[tuple[Any, ...], dict[str, Any]]) -> Callable[[], Any]:
        return lambda: self.fn(*static_inputs[0], **static_inputs[1])

    def _capture_entry(
        self,
        static_inputs: tuple[tuple[Any, ...], dict[str, Any]],
        inputs: list[torch.Tensor],
        eager: bool,
        stream: torch.cuda.Stream,
        pool_memory: PoolMemory | None = None,
        share_executables: bool | None = None,
    ) -> _Entry:
        """Warms ``fn`` up on ``static_inputs`` and captures it on ``stream`` into the pool.

        ``inputs`` are the caller's values, which each run starts from (they may be the static
        tensors themselves: the copies are then skipped). ``pool_memory``, when given, is the
        record of the pool's segments that the capture shares with other captures of the pool.
        The entry's outputs hold nothing valid until a replay.
        """
        static = tensor_leaves(static_inputs)
        run = self._run_on(static_inputs)
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for index in range(self.warmup):
                if index:  # each warm-up starts from the caller's values
                    _copy_into(static, inputs)
                run()
        torch.cuda.current_stream().wait_stream(stream)
        if self.warmup:
            # The warm-up may have written the buffers: the capture (which runs fn for real
            # with graphs disabled, and runs its eager breaks) starts from the caller's values.
            _copy_into(static, inputs)
        capture = BreakableCUDAGraphCapture(
            pool=self.pool,
            stream=stream,
            enabled=not eager,
            share_executables=share_executables,
        )
        if pool_memory is not None:
            capture._pool_memory = pool_memory
        with capture:
            outputs, written = _tracking_writes(static, run)
        addresses = [t.data_ptr() for t in tensor_leaves((static_inputs, outputs))]
        aliases = _input_aliases(tensor_leaves(outputs), static)
        return _Entry(static_inputs, outputs, capture, addresses, frozenset(written), aliases)

    def _first_call(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        inputs: list[torch.Tensor],
        eager: bool,
    ) -> _Entry:
        static_inputs = map_tensors((args, kwargs), _static_copy)
        entry = self._capture_entry(static_inputs, inputs, eager, torch.cuda.Stream())
        static = tensor_leaves(static_inputs)
        written = set(entry.written)
        if not eager:
            # Capture only records work: the outputs hold nothing valid until a replay, which
            # must start from the caller's values too (breaks ran on the buffers at capture).
            _copy_into(static, inputs)
            _, replay_written = _tracking_writes(static, entry.capture.replay)
            written |= replay_written
        _write_back(static, inputs, written)
        entry.written = frozenset(written)
        return entry

    @staticmethod
    def _copy_inputs(entry: _Entry, inputs: Any) -> None:
        _copy_into(tensor_leaves(entry.static_inputs), tensor_leaves(inputs))

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


def _copy_into(static: list[torch.Tensor], inputs: list[torch.Tensor]) -> None:
    for buffer, new in zip(static, inputs):
        if buffer.data_ptr() != new.data_ptr():
            buffer.copy_(new)


def _writable_parts(outputs: Any, fresh: Any) -> tuple[Any, Any]:
    """The outputs and ``fresh`` results, narrowed to one element along each dimension where an
    output repeats one element (an ``expand``): torch refuses to write such a tensor whole."""
    static, new = tensor_leaves(outputs), tensor_leaves(fresh)
    if len(static) != len(new):
        return outputs, fresh  # copy_result_back names the mismatch
    narrowed = []
    for old, result in zip(static, new):
        for dim, (size, stride) in enumerate(zip(old.shape, old.stride())):
            if stride == 0 and size > 1 and old.shape == result.shape:
                old, result = old.narrow(dim, 0, 1), result.narrow(dim, 0, 1)
        narrowed.append((old, result))
    return [old for old, _ in narrowed], [result for _, result in narrowed]


def _tracking_writes(static: list[torch.Tensor], run: Callable[[], Any]) -> tuple[Any, set[int]]:
    """``run()``'s result and the indices of the buffers it wrote (their versions moved)."""
    before = [t._version for t in static]
    result = run()
    return result, {i for i, (t, v) in enumerate(zip(static, before)) if t._version != v}


def _write_back(static: list[torch.Tensor], inputs: list[torch.Tensor], written: set[int]) -> None:
    """The caller's tensors ``fn`` wrote get what eager would have left in them."""
    for index in written:
        if static[index].data_ptr() != inputs[index].data_ptr():
            inputs[index].copy_(static[index])


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    storage = a.untyped_storage()
    # Empty tensors may all report address 0: they share nothing.
    return storage.nbytes() > 0 and storage.data_ptr() == b.untyped_storage().data_ptr()


def _input_aliases(outputs: list[torch.Tensor], static: list[torch.Tensor]) -> dict[int, int]:
    aliases: dict[int, int] = {}
    for out_index, out in enumerate(outputs):
        for in_index, buffer in enumerate(static):
            if _shares_memory(out, buffer):
                aliases[out_index] = in_index
                break
    return aliases


def _caller_view(out: torch.Tensor, buffer: torch.Tensor, caller: torch.Tensor) -> torch.Tensor:
    """``out``, a view of the runner's ``buffer``, as the same view of the ``caller``'s tensor."""
    if out is buffer:
        return caller
    if out.dtype != caller.dtype or buffer.stride() != caller.stride():
        # A buffer of another layout (_static_copy): no view of the caller's tensor matches.
        return out
    offset = caller.storage_offset() + out.storage_offset() - buffer.storage_offset()
    return caller.as_strided(out.shape, out.stride(), offset)


def _outputs_for(
    outputs: Any, aliases: dict[int, int], static_inputs: Any, inputs: list[torch.Tensor]
) -> Any:
    """``outputs``, with those that alias an input (``aliases``: output leaf -> input leaf of
    ``static_inputs``) turned into the same views of the caller's tensors ``inputs``."""
    if not aliases:
        return outputs
    static = tensor_leaves(static_inputs)
    position = itertools.count()
    views: dict[int, torch.Tensor] = {}  # one view per output object, as eager returns one

    def returned(out: torch.Tensor) -> torch.Tensor:
        source = aliases.get(next(position))
        if source is None:
            return out
        if id(out) not in views:
            views[id(out)] = _caller_view(out, static[source], inputs[source])
        return views[id(out)]

    return map_tensors(outputs, returned)
