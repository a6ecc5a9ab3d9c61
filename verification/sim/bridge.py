"""The bridge between device tensors (what user code holds) and host views (what ops run on).

:class:`Bridge` turns an aten call's device tensors into CPU tensors over the same bytes,
remembering which device storage each host storage stands for, and turns the op's results
back: a result over an argument's memory becomes a device tensor on that argument's storage
(views stay views), a fresh result on a simulator block becomes a device tensor on the block.
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch

from verification.sim.allocator import Allocator, Pool
from verification.sim.device_tensors import (
    HOST,
    copy_bits,
    device_storage,
    device_view,
    host_storage,
    host_view_on,
    set_layout,
)

_EMPTY_DEVICE_STORAGE: list[torch.UntypedStorage] = []


def _empty_device_storage() -> torch.UntypedStorage:
    if not _EMPTY_DEVICE_STORAGE:
        _EMPTY_DEVICE_STORAGE.append(device_storage(0, 0))
    return _EMPTY_DEVICE_STORAGE[0]


def is_device(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.is_cuda


class Bridge:
    """One call's mapping between host storages (by base address) and device storages."""

    __slots__ = ("allocator", "storages")

    def __init__(self, allocator: Allocator) -> None:
        self.allocator = allocator
        self.storages: dict[int, torch.UntypedStorage] = {}

    def to_host(self, x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return self.host_view(x) if x.is_cuda else x
        if isinstance(x, torch.device) and x.type == "cuda":
            return HOST
        return x

    def host_view(self, t: torch.Tensor) -> torch.Tensor:
        # The host storage owns nothing and cannot be resized, so a kernel can neither keep
        # a block alive nor reallocate it behind the allocator's back.
        storage = t.untyped_storage()
        self.storages.setdefault(storage.data_ptr(), storage)
        return host_view_on(host_storage(storage), t)

    def to_device(self, t: Any, pool: Pool) -> Any:
        """The device tensor for host result ``t``; memory from nowhere is moved into ``pool``."""
        if not isinstance(t, torch.Tensor) or t.is_cuda or t.layout != torch.strided:
            return t
        storage = t.untyped_storage()
        base = storage.data_ptr()
        device = self.storages.get(base)
        if device is None:
            if storage.nbytes() == 0:
                device = _empty_device_storage()
            else:
                block = self.allocator.find(base)
                if block is None or block.address != base:
                    block = self.adopt(storage, pool)
                device = block.device_storage
        out = device_view(device, t.dtype, t.shape, t.stride(), t.storage_offset())
        return copy_bits(t, out)

    def fresh(self, host_like: torch.Tensor, pool: Pool) -> torch.Tensor:
        """A new device tensor laid out like ``host_like``, on a (poisoned or reused) block,
        or on no memory if it needs none."""
        nbytes = host_like.untyped_storage().nbytes()
        return device_view(
            self.allocator.allocate(pool, nbytes).device_storage
            if nbytes
            else _empty_device_storage(),
            host_like.dtype,
            host_like.shape,
            host_like.stride(),
            host_like.storage_offset(),
        )

    def adopt(self, storage: torch.UntypedStorage, pool: Pool) -> Any:
        """Copies host memory the op allocated itself into a new block of ``pool``."""
        nbytes = storage.nbytes()
        block = self.allocator.allocate(pool, nbytes)
        ctypes.memmove(block.address, storage.data_ptr(), nbytes)  # host memory both
        return block

    def write_back(self, original: torch.Tensor, host: torch.Tensor, pool: Pool) -> None:
        """Carries a layout change the op made to ``host`` (resize, in-place view) to ``original``."""
        storage = host.untyped_storage()
        base = storage.data_ptr()
        same_storage = base == original.untyped_storage().data_ptr()
        if (
            same_storage
            and host.shape == original.shape
            and host.stride() == original.stride()
            and host.storage_offset() == original.storage_offset()
        ):
            return
        if same_storage:
            device = original.untyped_storage()
        else:
            device = self.to_device(host, pool).untyped_storage()
        set_layout(original, device, host.storage_offset(), host.shape, host.stride())
