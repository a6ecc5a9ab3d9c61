"""``CaptureSet``: a function of the batch captured at every batch size of a sweep, as an
engine's start-up captures it, then replayed at the smallest captured size that fits a batch.

Every size is captured at construction, largest first, into one memory pool, on one capture
stream, with Python's cyclic collector paused once for the whole sweep. The function reads
static buffers sized for the largest batch, sliced ``[:size]`` per size; a call copies the
batch in, pads the rest of the captured size, replays, and returns the outputs sliced back to
the batch. Warm-up, capture, written-input write-back and aliased outputs are
:class:`~breakable_cudagraph.runner.BreakableGraphRunner`'s own.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from . import collector, executables
from .arguments import PoolMemory, hold_for_replay
from .capture import BreakableCUDAGraphCapture
from .runner import (
    BreakableGraphRunner,
    _Entry,
    _outputs_for,
    _tracking_writes,
    _write_back,
)
from .switch import graphs_disabled
from .trees import map_tensors, tensor_leaves


def _checked_sizes(sizes: Iterable[int]) -> list[int]:
    """``sizes`` as a list, largest first; raises naming the first size that is not one."""
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Iterable):
        raise TypeError(f"sizes must be an iterable of ints, got {type(sizes).__name__}")
    listed = list(sizes)
    if not listed:
        raise ValueError("sizes is empty; give at least one batch size to capture")
    for size in listed:
        if isinstance(size, bool) or not isinstance(size, int):
            raise TypeError(f"every batch size must be an int, got {size!r}")
        if size < 1:
            raise ValueError(f"every batch size must be at least 1, got {size}")
    if len(set(listed)) != len(listed):
        twice = next(size for size in listed if listed.count(size) > 1)
        raise ValueError(f"batch size {twice} is given more than once")
    return sorted(listed, reverse=True)


def _checked_examples(example_inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    if isinstance(example_inputs, torch.Tensor) or not isinstance(example_inputs, Sequence):
        raise TypeError(
            "example_inputs must be a tuple or list of tensors (one per argument of fn), got "
            f"{type(example_inputs).__name__}"
        )
    if not example_inputs:
        raise ValueError("example_inputs is empty; fn needs at least one batched tensor")
    for index, example in enumerate(example_inputs):
        if not isinstance(example, torch.Tensor):
            raise TypeError(f"example input {index} is a {type(example).__name__}, not a tensor")
        if example.dim() == 0:
            raise ValueError(f"example input {index} is 0-dimensional; dim 0 must be the batch")
    return list(example_inputs)


@dataclass
class _Size:
    """One captured size: the runner's entry, its static inputs as a list (the buffers'
    ``[:size]``), and per batch that replays it the slices a call copies into, pads and returns."""

    size: int
    entry: _Entry
    static: list[torch.Tensor]
    # batch -> (the buffers' [:batch], their [batch:size], the outputs' [:batch])
    slices: dict[int, tuple[list[torch.Tensor], list[torch.Tensor], Any]]


class CaptureSet:
    """Capture ``fn`` at every batch size of ``sizes`` at construction; call it with a batch.

    ``fn(*inputs)`` takes tensors whose dim 0 is the batch (as ``example_inputs``, which give
    every dimension but the batch, the dtype and the device: their values are not used) and
    returns a tensor or a tuple/list/dict/dataclass of tensors, each with the batch as dim 0.
    Host state ``fn`` reads (sequence lengths, attention metadata) is the caller's to set before
    each call, as for any capture; an eager break (``eager_break_during_capture``) reads it
    at every replay.

    At construction every size is warmed up (``warmup`` eager runs) and captured, largest
    first, into ``pool`` (default: a new ``torch.cuda.graph_pool_handle()``) on ``stream``
    (default: a new ``torch.cuda.Stream()``), with the collector paused once for the sweep.
    ``fn`` reads static input buffers of the largest size, filled with ``pad_value``, sliced
    ``[:size]`` for the capture of ``size``.

    A call with a batch of ``n`` rows replays the smallest captured size ``s >= n``: it copies
    the inputs into the buffers' ``[:n]``, fills ``[n:s]`` with ``pad_value``, replays on the
    current stream and returns each output sliced ``[:n]``. Every input ``fn`` wrote is copied
    back, and an output that is an input (or views one) is returned as the caller's tensor, as
    :class:`BreakableGraphRunner` does. A batch above the largest size, or any call with graphs
    disabled (``enabled=False`` or ``BREAKABLE_CUDAGRAPH_DISABLE=1``, read at construction and at
    every call), runs ``fn`` eagerly on the caller's tensors.

    The rules an engine keeps:
      * Outputs are valid until the next call of the set (any size) and while the set lives:
        the captures share the pool, so every size's outputs may lie where another size's
        intermediates go. Read or copy them before calling again.
      * Replays run on the caller's current stream; read the outputs on that stream (or make
        the reading stream wait for it). Captures of one pool must never replay concurrently.
      * A pool given as ``pool`` is shared with the captures made there before and after; they
        follow the same rule. Drop every capture of a pool before relying on its memory again.
      * Capturing on the stream that replays is faster at replay (see ``capture._capture_stream``):
        an engine that replays on a non-default stream should pass it as ``stream``.

    ``share_executables=True`` (or ``BREAKABLE_CUDAGRAPH_SHARE_EXECUTABLES=1`` when None) lets
    the sizes share one instantiated executable per segment position where they launch the
    same kernels (see ``BreakableCUDAGraphCapture``): less device memory and instantiation,
    and a call at another size than the last pays a ``cudaGraphExecUpdate`` per shared segment.

    Bad arguments raise ``TypeError`` or ``ValueError`` before anything is allocated or
    captured; a capture that fails mid-sweep releases the sizes captured so far and re-raises.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        sizes: Iterable[int],
        example_inputs: Sequence[torch.Tensor],
        *,
        pad_value: float = 0,
        warmup: int = 1,
        pool: Any = None,
        stream: torch.cuda.Stream | None = None,
        enabled: bool | None = None,
        share_executables: bool | None = None,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"CaptureSet captures a callable, got {type(fn).__name__}")
        ordered = _checked_sizes(sizes)
        examples = _checked_examples(example_inputs)
        if isinstance(pad_value, bool) or not isinstance(pad_value, (int, float)):
            raise TypeError(f"pad_value must be an int or a float, got {pad_value!r}")
        # The runner checks warmup and owns the pool; its entries are this set's captures.
        self._runner = BreakableGraphRunner(fn, warmup=warmup, pool=pool, enabled=enabled)
        self.fn = fn
        self.pad_value = pad_value
        self.enabled = enabled
        self.share_executables = executables.sharing(share_executables)
        self.sizes: tuple[int, ...] = tuple(ordered)  # largest first, as captured
        self._ascending = sorted(ordered)
        self._buffers = [
            torch.full((ordered[0], *x.shape[1:]), pad_value, dtype=x.dtype, device=x.device)
            for x in examples
        ]
        self._captured: dict[int, _Size] = {}
        if not graphs_disabled(enabled):
            self._sweep(stream if stream is not None else torch.cuda.Stream())

    @property
    def pool(self) -> Any:
        """The memory pool every size is captured into."""
        return self._runner.pool

    @property
    def inputs(self) -> list[torch.Tensor]:
        """The static input buffers, one per argument of ``fn``, of the largest size."""
        return list(self._buffers)

    @property
    def captures(self) -> list[BreakableCUDAGraphCapture]:
        """One capture per size, in capture order (largest first); empty with graphs disabled."""
        return [self._captured[size].entry.capture for size in self.sizes if size in self._captured]

    def _sweep(self, stream: torch.cuda.Stream) -> None:
        # One record of the pool's segments for the sweep: a capture only adds segments, so
        # each capture no longer pays a fresh snapshot of the allocator on its first break,
        # and the tensors outside the pool that one size held (weights, caches) are known to
        # the next without a look-up.
        pool_memory = PoolMemory(self.pool, sweep=True)
        collector.pause()
        try:
            for size in self.sizes:
                self._captured[size] = self._capture(size, stream, pool_memory)
        except BaseException:
            self.reset()
            raise
        finally:
            pool_memory.forget_held()
            collector.resume()

    def _capture(self, size: int, stream: torch.cuda.Stream, pool_memory: PoolMemory) -> _Size:
        static = [buffer[:size] for buffer in self._buffers]
        entry = self._runner._capture_entry(
            ((*static,), {}), static, False, stream, pool_memory, self.share_executables
        )
        for index, out in enumerate(tensor_leaves(entry.outputs)):
            if out.dim() == 0 or out.shape[0] != size:
                entry.capture.reset()
                raise ValueError(
                    f"output {index} of fn at batch size {size} has shape {tuple(out.shape)}; "
                    "every output's dim 0 must be the batch"
                )
        # Outputs made in the pool are held by non-owning aliases: their memory goes back to
        # the pool for the smaller sizes captured next, as each replay's outputs are read
        # before the next call (an engine's rule, above), and the pool stays as large as the
        # largest size needs rather than growing by every size's outputs.
        entry.outputs = hold_for_replay(entry.outputs, pool_memory)
        return _Size(size, entry, static, {})

    def _slices(
        self, captured: _Size, batch: int
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], Any]:
        sliced = captured.slices.get(batch)
        if sliced is None:
            inputs = [buffer[:batch] for buffer in self._buffers]
            # No padding at a captured size: filling an empty slice still costs a dispatch.
            padding = [buffer[batch : captured.size] for buffer in self._buffers]
            if batch == captured.size:
                padding = []
            outputs = map_tensors(captured.entry.outputs, lambda out: out[:batch])
            sliced = captured.slices[batch] = (inputs, padding, outputs)
        return sliced

    def _batch_of(self, inputs: tuple[Any, ...]) -> int:
        if len(inputs) != len(self._buffers):
            raise TypeError(
                f"this CaptureSet takes {len(self._buffers)} batched tensors, got {len(inputs)}"
            )
        batch = None
        for index, (x, buffer) in enumerate(zip(inputs, self._buffers)):
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"input {index} is a {type(x).__name__}, not a tensor")
            if x.shape[1:] != buffer.shape[1:] or x.dtype != buffer.dtype or x.dim() == 0:
                raise ValueError(
                    f"input {index} is {x.dtype} of shape {tuple(x.shape)}; the capture set "
                    f"takes {buffer.dtype} of shape (batch, {', '.join(map(str, buffer.shape[1:]))})"
                )
            if x.device != buffer.device:
                raise ValueError(
                    f"input {index} is on {x.device}, the capture set's on {buffer.device}"
                )
            if batch is None:
                batch = x.shape[0]
            elif x.shape[0] != batch:
                raise ValueError(
                    f"input {index} has batch {x.shape[0]} where input 0 has {batch}; "
                    "every input's dim 0 must be the same batch"
                )
        if not batch:
            raise ValueError("the batch is empty (dim 0 is 0); call fn directly")
        return batch

    def __call__(self, *inputs: torch.Tensor) -> Any:
        batch = self._batch_of(inputs)
        if batch > self.sizes[0] or not self._captured or graphs_disabled(self.enabled):
            return self.fn(*inputs)
        captured = self._captured[self._ascending[bisect.bisect_left(self._ascending, batch)]]
        static, padding, outputs = self._slices(captured, batch)
        for buffer, x in zip(static, inputs):
            if buffer.data_ptr() != x.data_ptr():
                buffer.copy_(x)
        for pad in padding:
            pad.fill_(self.pad_value)
        entry = captured.entry
        _, written = _tracking_writes(captured.static, entry.capture.replay)
        written |= entry.written
        if written:
            _write_back(static, list(inputs), written)
        if not entry.aliases:
            return outputs
        return _outputs_for(outputs, entry.aliases, (static, {}), list(inputs))

    def reset(self) -> None:
        """Free every size's graphs; later calls run ``fn`` eagerly."""
        captured, self._captured = self._captured, {}
        for each in captured.values():
            each.entry.capture.reset()
