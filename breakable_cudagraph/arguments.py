"""Holds a break's arguments and results for replay without keeping capture intermediates alive.

``hold_for_replay(tree, pool_memory)`` copies ``tree``, replacing every tensor whose storage lies
in the capture's memory pool by a non-owning alias (same address, dtype, shape, strides; it keeps
nothing alive and frees nothing) and keeping every other tensor by strong reference, which is what
stops its memory being freed and reused under the eager step. Pool memory stays reserved while the
capture's graphs live, and the capture owns both the graphs and the aliases, so an alias is never
read after its memory could be handed to anyone else.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from .trees import map_tensors, tensor_leaves

# Private torch API (used by torch's own cudagraph trees); without it every tensor is held
# strongly, which is still safe but keeps capture intermediates alive as long as the capture.
_construct_storage = getattr(torch._C, "_construct_storage_from_data_pointer", None)


class PoolMemory:
    """Answers whether an address lies in the segments the allocator gave to one memory pool.

    Ranges come from ``torch.cuda.memory_snapshot()``; they are cached and refreshed once on a
    miss, which is enough because a pool only grows while its capture runs. Addresses found
    outside the pool are remembered too: their tensors are then held strongly for the
    capture's life, so that memory cannot be freed and handed to the pool meanwhile, and a
    break on weights or caches does not pay a snapshot every time.
    """

    def __init__(self, pool: Any) -> None:
        self._pool = tuple(pool)
        self._ranges: list[tuple[int, int]] = []
        self._outside: set[int] = set()

    def _refresh(self) -> None:
        self._ranges = [
            (segment["address"], segment["address"] + segment["total_size"])
            for segment in torch.cuda.memory_snapshot()
            if tuple(segment.get("segment_pool_id") or ()) == self._pool
        ]

    def _cached(self, address: int) -> bool:
        return any(start <= address < end for start, end in self._ranges)

    def addresses_in_pool(self, addresses: Iterable[int]) -> set[int]:
        """The subset of ``addresses`` that lie in the pool (one snapshot at most per call)."""
        wanted = set(addresses) - self._outside
        found = {address for address in wanted if self._cached(address)}
        if found != wanted:
            self._refresh()
            found = {address for address in wanted if self._cached(address)}
            self._outside |= wanted - found
        return found


def _aliasable(tensor: torch.Tensor) -> bool:
    # Only plain strided tensors can be rebuilt exactly from (storage, offset, size, stride);
    # anything else (subclasses, sparse, conj/neg views, empty storage) is held strongly.
    return (
        _construct_storage is not None
        and type(tensor) is torch.Tensor
        and tensor.layout is torch.strided
        and not tensor.is_conj()
        and not tensor.is_neg()
        and tensor.untyped_storage().nbytes() > 0
    )


def non_owning_alias(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor viewing ``tensor``'s memory that neither owns nor keeps alive that memory."""
    storage = tensor.untyped_storage()
    borrowed = _construct_storage(storage.data_ptr(), tensor.device, storage.nbytes())
    alias = torch.empty(0, dtype=tensor.dtype, device=tensor.device)
    return alias.set_(borrowed, tensor.storage_offset(), tensor.size(), tensor.stride())


def hold_for_replay(tree: Any, pool_memory: PoolMemory) -> Any:
    """``tree`` with pool tensors replaced by non-owning aliases and the rest held as they are."""
    # Keyed by id: the tree keeps every leaf alive meanwhile, and each tensor is inspected
    # once (the walk is most of a break's capture cost, issue #9).
    candidates = {
        id(t): (t, t.untyped_storage().data_ptr()) for t in tensor_leaves(tree) if _aliasable(t)
    }
    if not candidates:
        return tree
    in_pool = pool_memory.addresses_in_pool(address for _, address in candidates.values())
    aliased = {key for key, (_, address) in candidates.items() if address in in_pool}
    if not aliased:
        return tree  # nothing to replace: map_tensors would return tree itself

    def hold(tensor: torch.Tensor) -> torch.Tensor:
        return non_owning_alias(tensor) if id(tensor) in aliased else tensor

    return map_tensors(tree, hold)
