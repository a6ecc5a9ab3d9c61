"""Recorded graph steps: an aten call whose tensors are named by simulated address.

A :class:`BlockRef` names memory (block, dtype, size, stride, offset) without owning it,
as a CUDA graph names raw pointers; tensors not from the simulator's allocator are held
strongly. Replaying a step runs the op on whatever the memory holds at replay time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from verification.sim.allocator import Allocator, Block

_HOST = torch.device("cpu")


class BlockRef:
    """A tensor view over a block's memory, built on first use and kept.

    The kept view is over a storage of its own that owns nothing, not over ``block.storage``:
    holding it neither keeps the block in use nor frees its memory, like a raw pointer.
    Steps run ops that change no argument's layout (those run at capture), so the view
    every replay gets is the one the capture described.
    """

    __slots__ = ("_view", "block", "dtype", "offset", "size", "stride")

    def __init__(
        self, block: Block, dtype: torch.dtype, size: Any, stride: Any, offset: int
    ) -> None:
        self.block = block
        self.dtype = dtype
        self.size = size
        self.stride = stride
        self.offset = offset
        self._view: torch.Tensor | None = None

    def tensor(self) -> torch.Tensor:
        view = self._view
        if view is None:
            block = self.block
            storage = torch._C._construct_storage_from_data_pointer(
                block.address, _HOST, block.size
            )
            view = torch.empty(0, dtype=self.dtype, device=_HOST).set_(
                storage, self.offset, self.size, self.stride
            )
            self._view = view
        return view


class HeldRef:
    """A tensor the simulator did not allocate (made before it started): held strongly."""

    __slots__ = ("held",)

    def __init__(self, held: torch.Tensor) -> None:
        self.held = held

    def tensor(self) -> torch.Tensor:
        return self.held


TensorRef = BlockRef | HeldRef


def ref_to(t: torch.Tensor, allocator: Allocator) -> TensorRef:
    if type(t) is not torch.Tensor or t.device.type != "cpu" or t.layout != torch.strided:
        return HeldRef(t)
    base = t.untyped_storage().data_ptr()
    block = allocator.find(base)
    if block is None:
        return HeldRef(t)
    byte_offset = base - block.address + t.storage_offset() * t.element_size()
    if byte_offset % t.element_size():
        return HeldRef(t)
    return BlockRef(block, t.dtype, tuple(t.shape), t.stride(), byte_offset // t.element_size())


CallSpec = tuple[tuple[Any, ...], tuple[str, ...]]


def flatten_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[Any], CallSpec]:
    """Flattens an aten call: its arguments are leaves or flat lists/tuples of leaves.

    Much cheaper than a general pytree, which matters because every captured op pays it.
    """
    leaves: list[Any] = []
    shapes: list[Any] = []
    for value in (*args, *kwargs.values()):
        if isinstance(value, (list, tuple)):
            shapes.append((type(value), len(value)))
            leaves.extend(value)
        else:
            shapes.append(None)
            leaves.append(value)
    return leaves, (tuple(shapes), tuple(kwargs))


def unflatten_call(leaves: list[Any], spec: CallSpec) -> tuple[tuple[Any, ...], dict[str, Any]]:
    shapes, names = spec
    values: list[Any] = []
    i = 0
    for shape in shapes:
        if shape is None:
            values.append(leaves[i])
            i += 1
        else:
            kind, n = shape
            values.append(kind(leaves[i : i + n]))
            i += n
    n_args = len(shapes) - len(names)
    return tuple(values[:n_args]), dict(zip(names, values[n_args:]))


class Step:
    """One recorded op: ``func`` on referenced inputs; fresh results copied into ``outputs``.

    ``leaves`` and ``spec`` are the call as :func:`flatten_call` gives it, its tensors
    already turned into refs (:func:`ref_to`). ``outputs`` has one entry per schema return:
    ``None`` (aliases an input, nothing to copy), a ref, or a list of refs for ``Tensor[]``
    returns.
    """

    __slots__ = ("func", "leaves", "outputs", "single_return", "spec")

    def __init__(
        self,
        func: Any,
        leaves: list[Any],
        spec: CallSpec,
        outputs: list[Any],
        single_return: bool,
    ) -> None:
        self.func = func
        self.leaves = leaves
        self.spec = spec
        self.outputs = outputs
        self.single_return = single_return

    def run(self, observe: Callable[..., None] | None = None) -> None:
        """Executes the step; the caller disables the dispatch mode and autograd.

        ``observe(func, args, kwargs, written)`` sees the call and the output tensors it
        wrote (the race detector's view of a replayed op).
        """
        leaves = [x.tensor() if isinstance(x, (BlockRef, HeldRef)) else x for x in self.leaves]
        args, kwargs = unflatten_call(leaves, self.spec)
        result = self.func(*args, **kwargs)
        results = (result,) if self.single_return else result
        written: list[torch.Tensor] = []
        for target, value in zip(self.outputs, results):
            if target is None:
                continue
            if isinstance(target, list):
                for t, v in zip(target, value):
                    written.append(t.tensor().copy_(v))
            else:
                written.append(target.tensor().copy_(value))
        if observe is not None:
            observe(self.func, args, kwargs, written)
