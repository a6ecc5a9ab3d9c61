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

    ``held`` maps ``id(tensor)`` to ``(tensor, tensor.data_ptr())`` for each plain tensor
    argument found outside the pool and so held by strong reference: a later break given the
    same tensor, still at the same address, holds it again without a lookup (most breaks take
    the same buffers every time). The entry keeps the tensor alive, so its id is not reused meanwhile, and holding
    it again changes no lifetime; a tensor whose storage was swapped since has moved and is
    looked up afresh. The capture empties it with ``forget_held`` when it closes.
    """

    def __init__(self, pool: Any) -> None:
        self._pool = tuple(pool)
        self._ranges: list[tuple[int, int]] = []
        self._outside: set[int] = set()
        self.held: dict[int, tuple[torch.Tensor, int]] = {}

    def forget_held(self) -> None:
        self.held = {}

    def _refresh(self) -> None:
        self._ranges = [
            (segment["address"], segment["address"] + segment["total_size"])
            # The whole snapshot, not torch's ``mempool_id=`` form: asked for the pool alone
            # during a capture, torch 2.11 crashed the process on the H200 (segfaults in two
            # suite workers).
            for segment in torch.cuda.memory_snapshot()
            if tuple(segment.get("segment_pool_id") or ()) == self._pool
        ]

    def _cached(self, address: int) -> bool:
        for start, end in self._ranges:
            if start <= address < end:
                return True
        return False

    def addresses_in_pool(self, addresses: Iterable[int]) -> set[int]:
        """The subset of ``addresses`` that lie in the pool (one snapshot at most per call)."""
        wanted = set(addresses)
        if self._outside:
            wanted -= self._outside
        found = {address for address in wanted if self._cached(address)}
        if len(found) != len(wanted):
            self._refresh()
            found = {address for address in wanted if self._cached(address)}
            self._outside |= wanted - found
        return found


def _alias_address(tensor: torch.Tensor) -> int | None:
    """The address of ``tensor``'s storage if a non-owning alias can stand in for it, else None."""
    # Only plain strided tensors can be rebuilt exactly from (storage, offset, size, stride);
    # anything else (subclasses, sparse, conj/neg views, empty storage) is held strongly.
    if (
        _construct_storage is None
        or type(tensor) is not torch.Tensor
        or tensor.layout is not torch.strided
        or tensor.is_conj()
        or tensor.is_neg()
    ):
        return None
    storage = tensor.untyped_storage()
    return storage.data_ptr() if storage.nbytes() > 0 else None


def non_owning_alias(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor viewing ``tensor``'s memory that neither owns nor keeps alive that memory."""
    storage = tensor.untyped_storage()
    borrowed = _construct_storage(storage.data_ptr(), tensor.device, storage.nbytes())
    # new_empty rather than torch.empty(..., dtype=, device=): same tensor, a third of the
    # argument parsing, and every break pays it at capture.
    alias = tensor.new_empty(0)
    return alias.set_(borrowed, tensor.storage_offset(), tensor.size(), tensor.stride())


def hold_for_replay(tree: Any, pool_memory: PoolMemory) -> Any:
    """``tree`` with pool tensors replaced by non-owning aliases and the rest held as they are."""
    # Keyed by id: the tree keeps every leaf alive meanwhile, and each tensor is inspected
    # once (the walk is most of a break's capture cost).
    candidates: dict[int, int] = {}
    for tensor in tensor_leaves(tree):
        if id(tensor) not in candidates:
            address = _alias_address(tensor)
            if address is not None:
                candidates[id(tensor)] = address
    if not candidates:
        return tree
    in_pool = pool_memory.addresses_in_pool(candidates.values())
    aliased = {key for key, address in candidates.items() if address in in_pool}
    if not aliased:
        return tree  # nothing to replace: map_tensors would return tree itself

    def hold(tensor: torch.Tensor) -> torch.Tensor:
        return non_owning_alias(tensor) if id(tensor) in aliased else tensor

    return map_tensors(tree, hold)


# Leaves of a call's arguments that need no tree walk: most breaks take only these.
_FLAT_LEAVES = frozenset({torch.Tensor, type(None), bool, int, float, str})


def hold_call_arguments(
    args: tuple[Any, ...], kwargs: dict[str, Any], pool_memory: PoolMemory
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``hold_for_replay((args, kwargs), pool_memory)``, without the tree walk when no keyword
    arguments are given and every positional one is a plain tensor, a number, a string or None
    (each break pays this at capture)."""
    if kwargs or type(args) is not tuple:
        return hold_for_replay((args, kwargs), pool_memory)
    held = pool_memory.held
    for arg in args:  # the common case: every tensor already held strongly, not moved since
        if type(arg) is torch.Tensor:
            entry = held.get(id(arg))
            if entry is None or entry[1] != arg.data_ptr():
                break
        elif type(arg) not in _FLAT_LEAVES:
            return hold_for_replay((args, kwargs), pool_memory)
    else:
        return args, kwargs
    addresses: list[int | None] = []
    for arg in args:
        if type(arg) is torch.Tensor:
            addresses.append(_alias_address(arg))
        elif type(arg) in _FLAT_LEAVES:
            addresses.append(None)
        else:
            return hold_for_replay((args, kwargs), pool_memory)
    wanted = [address for address in addresses if address is not None]
    in_pool = pool_memory.addresses_in_pool(wanted) if wanted else None
    for arg, address in zip(args, addresses):
        # Only plain tensors that could have been aliased: data_ptr() is safe on them.
        if address is not None and (not in_pool or address not in in_pool):
            held[id(arg)] = (arg, arg.data_ptr())
    if not in_pool:
        return args, kwargs
    # One alias per occurrence, as map_tensors makes.
    aliased = tuple(
        non_owning_alias(arg) if address in in_pool else arg
        for arg, address in zip(args, addresses)
    )
    return aliased, kwargs
