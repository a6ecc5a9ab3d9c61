"""Simulated CUDA caching allocator: pools of blocks, each block its own CPU storage.

The allocator holds exactly one reference to each block's host and device storage, so a
block is in use iff either use count exceeds one (tensors and views keep memory alive as on
CUDA; non-owning aliases built with ``_construct_storage_from_data_pointer`` do not).
Free blocks are scribbled with the bytes ``FF 7F`` when reclaimed; released blocks wait
in a quarantine until the session ends, so stale raw pointers read poison, never crash.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from collections.abc import Callable

import torch

from verification.sim.device_tensors import device_storage

BLOCK_BYTES = 512
# Bytes FF 7F: a NaN in float16/bfloat16/float32/float64 and a huge, easy to spot integer.
POISON_INT16 = 0x7FFF
DEFAULT_POOL_ID = (0, 0)
# A free block is reused for a request at most this many times smaller than itself.
MAX_REUSE_SLACK = 2

PoolId = tuple[int, int]


def _use_count(storage: torch.UntypedStorage) -> int:
    return torch._C._storage_Use_Count(storage._cdata)


def poison(storage: torch.UntypedStorage) -> None:
    """Fills all of ``storage`` with the poison pattern."""
    with torch._C._DisableTorchDispatch():
        words = torch.empty(0, dtype=torch.int16).set_(storage, 0, (storage.nbytes() // 2,), (1,))
        words.fill_(POISON_INT16)


class Block:
    """One simulated device allocation; ``address`` is stable for the block's life."""

    __slots__ = ("address", "device_storage", "pool", "size", "storage")

    def __init__(self, size: int, pool: Pool) -> None:
        self.storage = torch.UntypedStorage(size)
        self.size = size
        self.pool = pool
        self.address = self.storage.data_ptr()
        # What device tensors hold: the same bytes, seen as CUDA memory.
        self.device_storage = device_storage(self.address, size)

    def in_use(self) -> bool:
        # Device tensors hold device_storage; host views made while an op runs hold storage.
        return _use_count(self.device_storage) > 1 or _use_count(self.storage) > 1


class Pool:
    """Blocks handed out (``live``, maybe freed since) and known free (``free``)."""

    def __init__(self, pool_id: PoolId) -> None:
        self.id = pool_id
        self.live: list[Block] = []
        self.free: list[Block] = []
        # Graphs (and the capture in progress) that may replay into this pool's memory.
        self.graph_refs = 0

    def blocks(self) -> list[Block]:
        return self.live + self.free


class Allocator:
    """Pools by id, address lookup of blocks, and the quarantine of released storages."""

    def __init__(self, on_growth: Callable[[], None]) -> None:
        self._on_growth = on_growth
        # Called with a freed block before it serves a new allocation (race detection).
        self.on_reuse: Callable[[Block], None] | None = None
        self._lock = threading.RLock()
        self.pools: dict[PoolId, Pool] = {DEFAULT_POOL_ID: Pool(DEFAULT_POOL_ID)}
        self._addresses: list[int] = []
        self._by_address: dict[int, Block] = {}
        self.quarantine: list[torch.UntypedStorage] = []
        self._private_ids = itertools.count(1)
        self._handle_ids = itertools.count(1)

    @property
    def default_pool(self) -> Pool:
        return self.pools[DEFAULT_POOL_ID]

    def new_handle(self) -> PoolId:
        return (0, next(self._handle_ids))

    def capture_pool(self, handle: PoolId | None) -> Pool:
        """The pool a capture allocates from: ``handle``'s (shared) or a fresh private one."""
        pool_id = (next(self._private_ids), 0) if handle is None else tuple(handle)
        with self._lock:
            return self.pools.setdefault(pool_id, Pool(pool_id))  # type: ignore[arg-type]

    def allocate(self, pool: Pool, nbytes: int) -> Block:
        size = -(-max(nbytes, 1) // BLOCK_BYTES) * BLOCK_BYTES
        with self._lock:
            self._reclaim(pool)
            fitting = [b for b in pool.free if size <= b.size <= size * MAX_REUSE_SLACK]
            if fitting:
                block = min(fitting, key=lambda b: b.size)
                if self.on_reuse is not None:
                    self.on_reuse(block)
                pool.free.remove(block)
            else:
                self._on_growth()
                block = Block(size, pool)
                poison(block.storage)
                bisect.insort(self._addresses, block.address)
                self._by_address[block.address] = block
            pool.live.append(block)
            return block

    def find(self, address: int) -> Block | None:
        """The block whose memory contains ``address``, if any."""
        i = bisect.bisect_right(self._addresses, address) - 1
        if i < 0:
            return None
        block = self._by_address[self._addresses[i]]
        return block if address < block.address + block.size else None

    def _reclaim(self, pool: Pool) -> None:
        still_live = []
        for block in pool.live:
            if block.in_use():
                still_live.append(block)
            else:
                poison(block.storage)
                pool.free.append(block)
        pool.live = still_live

    def release_unused(self, capturing: set[Pool]) -> None:
        """``empty_cache``: free blocks of the default pool and of pools no graph holds."""
        with self._lock:
            for pool in list(self.pools.values()):
                if pool in capturing or (pool.graph_refs > 0 and pool.id != DEFAULT_POOL_ID):
                    continue
                self._reclaim(pool)
                for block in pool.free:
                    i = bisect.bisect_left(self._addresses, block.address)
                    del self._addresses[i]
                    del self._by_address[block.address]
                    self.quarantine.append(block.storage)
                pool.free = []

    def stats(self) -> tuple[int, int]:
        """(allocated bytes, reserved bytes) over all pools."""
        with self._lock:
            blocks = [b for pool in self.pools.values() for b in pool.blocks()]
            return sum(b.size for b in blocks if b.in_use()), sum(b.size for b in blocks)

    def snapshot(self) -> list[dict[str, object]]:
        with self._lock:
            return [
                {
                    "device": 0,
                    "address": block.address,
                    "total_size": block.size,
                    "allocated_size": block.size if block.in_use() else 0,
                    "segment_pool_id": pool.id,
                }
                for pool in self.pools.values()
                for block in pool.blocks()
            ]
