"""Simulated CUDA caching allocator: pools of blocks carved from segments of CPU memory.

Sizes as CUDA's caching allocator makes them: a request rounds up to 512 bytes; one of
at most 1 MiB comes from a 2 MiB segment shared with other small ones, a larger one from a
20 MiB segment below 10 MiB and otherwise from a segment of its size rounded up to 2 MiB,
and blocks of the two kinds never mix. So ``memory_allocated``, ``memory_reserved`` and
their peaks count what CUDA's count. Best fit with block splitting and coalescing of free
neighbours, as the caching allocator, so a block freed by one capture can serve a smaller
allocation of the next capture sharing its pool.
The allocator holds exactly one reference to each block's host and device storage, so a
block is in use iff either use count exceeds one (tensors and views keep memory alive as on
CUDA; non-owning aliases built with ``_construct_storage_from_data_pointer`` do not).
Free blocks are scribbled with the bytes ``FF 7F`` when reclaimed; released blocks wait
in a quarantine until the session ends, so stale raw pointers read poison, never crash.
A new segment's memory is poisoned as blocks are carved from it, so the untouched rest of
a segment costs the host no memory.
"""

from __future__ import annotations

import bisect
import ctypes
import itertools
import threading
from collections.abc import Callable

import torch

from verification.sim.device_tensors import device_storage

BLOCK_BYTES = 512
# Bytes FF 7F: a NaN in float16/bfloat16/float32/float64 and a huge, easy to spot integer.
POISON_INT16 = 0x7FFF
DEFAULT_POOL_ID = (0, 0)
# As in CUDA's caching allocator: requests up to 1 MiB are "small" and split a free block
# whenever at least BLOCK_BYTES remain; larger ones split only if more than 1 MiB remains.
SMALL_REQUEST = 1 << 20
SMALL_SEGMENT = 2 << 20  # what a small request reserves when no free block fits
LARGE_SEGMENT = 20 << 20  # ... and a large one below MIN_LARGE_ALLOC
MIN_LARGE_ALLOC = 10 << 20
LARGE_ROUNDING = 2 << 20  # larger requests reserve their size rounded up to this


def rounded(nbytes: int) -> int:
    """The block size CUDA's caching allocator gives a request of ``nbytes``."""
    return -(-max(nbytes, 1) // BLOCK_BYTES) * BLOCK_BYTES


def segment_bytes(size: int) -> int:
    """The segment CUDA's caching allocator reserves for a block of ``size`` bytes."""
    if size <= SMALL_REQUEST:
        return SMALL_SEGMENT
    if size < MIN_LARGE_ALLOC:
        return LARGE_SEGMENT
    return -(-size // LARGE_ROUNDING) * LARGE_ROUNDING


PoolId = tuple[int, int]


_storage_use_count = torch._C._storage_Use_Count


# The poison pattern, for blocks small enough to take it in one memmove: every block freed
# is poisoned, and three torch calls (a view, set_, fill_) cost more than the fill itself.
_POISON_BYTES = POISON_INT16.to_bytes(2, "little") * (SMALL_REQUEST // 2)


def poison(storage: torch.UntypedStorage) -> None:
    """Fills all of ``storage`` with the poison pattern (an odd last byte stays as it is)."""
    nbytes = storage.nbytes() & ~1
    if nbytes <= len(_POISON_BYTES):
        ctypes.memmove(storage.data_ptr(), _POISON_BYTES, nbytes)
        return
    with torch._C._DisableTorchDispatch():
        words = torch.empty(0, dtype=torch.int16, device="cpu")
        words.set_(storage, 0, (storage.nbytes() // 2,), (1,))
        words.fill_(POISON_INT16)


class Block:
    """One simulated device allocation: ``size`` bytes of a segment (one ``cudaMalloc``)."""

    __slots__ = (
        "_device_cdata",
        "_host_cdata",
        "address",
        "counted",
        "device_storage",
        "pool",
        "segment",
        "segment_number",
        "size",
        "small_segment",
        "storage",
        "untouched",
    )

    def __init__(
        self,
        segment: torch.UntypedStorage,
        segment_number: int,
        address: int,
        size: int,
        pool: Pool,
        untouched: bool = False,
    ) -> None:
        self.segment = segment  # owns the memory; blocks of one segment split and merge
        # Which segment came first, and where in it: the host addresses of two segments are
        # in whatever order the host's malloc and ASLR gave them, so choosing between equal
        # free blocks by host address would reuse memory differently from run to run.
        self.segment_number = segment_number
        self.address = address
        self.size = size
        self.pool = pool
        # Neither storage owns memory, so each counts only the tensors using this block:
        # host views made while an op runs hold ``storage``, device tensors ``device_storage``.
        self.storage = torch._C._construct_storage_from_data_pointer(
            address, torch.device("cpu"), size
        )
        self.device_storage = device_storage(address, size)
        # Allocation asks every block of a pool whether it is in use, and best fit asks
        # every free block its segment's size class: both read from fields set here (the
        # block holds both storages for its life, and a segment never changes size).
        self._host_cdata = self.storage._cdata
        self._device_cdata = self.device_storage._cdata
        self.small_segment = segment.nbytes() <= SMALL_SEGMENT
        # Part of a new segment that no allocation has had yet: poisoned when handed out.
        self.untouched = untouched
        self.counted = False  # in the allocator's running total of live bytes

    def whole_segment(self) -> bool:
        return self.size == self.segment.nbytes()

    def in_use(self) -> bool:
        # Device tensors hold device_storage; host views made while an op runs hold storage.
        return (
            _storage_use_count(self._device_cdata) > 1 or _storage_use_count(self._host_cdata) > 1
        )


def _fit_order(block: Block) -> tuple[int, int, int]:
    """Best fit, then the oldest segment, then the lowest offset in it: the same choice in
    every run of a program."""
    return block.size, block.segment_number, block.address - block.segment.data_ptr()


class Pool:
    """Blocks handed out (``live``, maybe freed since) and known free (``free``)."""

    def __init__(self, pool_id: PoolId) -> None:
        self.id = pool_id
        self.live: list[Block] = []
        self.free: list[Block] = []
        # Graphs (and the capture in progress) that may replay into this pool's memory.
        self.graph_refs = 0
        # torch's capture_end raises before it ends the pool's allocation routing when CUDA
        # invalidated the capture; on torch 2.11 nothing reachable from Python ends it (the
        # host allocator's routing stays even after _cuda_endAllocateToPool), so every later
        # capture into the pool fails (bench/probes/pool_recovery.py on the H200).
        self.still_recording = False
        # Once the last graph using a shared pool is released, torch keeps the id's
        # bookkeeping at use count 0 and a later capture into it fails an internal assert.
        self.released = False

    def blocks(self) -> list[Block]:
        return self.live + self.free


class Allocator:
    """Pools by id, address lookup of blocks, and the quarantine of released storages."""

    def __init__(self, on_growth: Callable[[], None], stream_of: Callable[[], int]) -> None:
        self._on_growth = on_growth
        # CUDA's caching allocator hands a free block only to the stream that allocated its
        # segment (a block another stream still reads is kept from it by record_stream):
        # a capture on a new stream, or a second capture of a shared pool on another stream,
        # takes a new segment on the H200 (bench/probes/memory_accounting.py).
        self._stream_of = stream_of
        self._segment_stream: dict[int, int] = {}
        # Called with a freed block before it serves a new allocation (race detection).
        self.on_reuse: Callable[[Block], None] | None = None
        self._lock = threading.RLock()
        self.pools: dict[PoolId, Pool] = {DEFAULT_POOL_ID: Pool(DEFAULT_POOL_ID)}
        self._addresses: list[int] = []
        self._by_address: dict[int, Block] = {}
        self.quarantine: list[torch.UntypedStorage] = []
        self._peak = 0
        # Bytes of the ``counted`` blocks of the pools' ``live`` lists: a block freed since
        # is counted until its pool next reclaims or a new peak is taken.
        self._live_bytes = 0
        self._private_ids = itertools.count(1)
        self._handle_ids = itertools.count(1)
        self._segments = itertools.count()

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
        size = rounded(nbytes)
        with self._lock:
            self._reclaim(pool)
            small = size <= SMALL_REQUEST
            stream = self._stream_of()
            owner = self._segment_stream
            fitting = [
                b
                for b in pool.free
                if b.size >= size and b.small_segment == small and owner[b.segment_number] == stream
            ]
            if fitting:  # best fit, as the caching allocator
                block = min(fitting, key=_fit_order)
                # Even a block partly untouched: freed memory merged with the untouched rest
                # of its segment (no other stream's block in between) is still reused.
                if self.on_reuse is not None:
                    self.on_reuse(block)
                pool.free.remove(block)
            else:
                self._on_growth()
                segment = torch.UntypedStorage(segment_bytes(size))
                number = next(self._segments)
                owner[number] = stream
                block = Block(segment, number, segment.data_ptr(), segment.nbytes(), pool, True)
                self._index(block)
            rest = block.size - size
            if rest >= BLOCK_BYTES if small else rest > SMALL_REQUEST:
                block = self._split(block, size)
            if block.untouched:
                poison(block.storage)
                block.untouched = False
            pool.live.append(block)
            block.counted = True
            self._live_bytes += block.size
            if self._live_bytes > self._peak:
                self._uncount_freed(pool)
                self._peak = max(self._peak, self._live_bytes)
            return block

    def _uncount_freed(self, reclaimed: Pool) -> None:
        """Stops counting the blocks of other pools' ``live`` lists that nothing uses any
        more (``reclaimed`` has none), so that a new peak is CUDA's, which counts a block
        free as soon as it is."""
        for pool in self.pools.values():
            if pool is reclaimed:
                continue
            for block in pool.live:
                if block.counted and not block.in_use():
                    block.counted = False
                    self._live_bytes -= block.size

    def _index(self, block: Block) -> None:
        if block.address not in self._by_address:
            bisect.insort(self._addresses, block.address)
        self._by_address[block.address] = block

    def _unindex(self, block: Block) -> None:
        i = bisect.bisect_left(self._addresses, block.address)
        del self._addresses[i]
        del self._by_address[block.address]

    def _split(self, block: Block, size: int) -> Block:
        """The first ``size`` bytes of free ``block`` as a new block; the rest stays free."""
        number, untouched = block.segment_number, block.untouched
        head = Block(block.segment, number, block.address, size, block.pool, untouched)
        tail = Block(
            block.segment, number, block.address + size, block.size - size, block.pool, untouched
        )
        self._index(head)
        self._index(tail)
        block.pool.free.append(tail)
        return head

    def _merge_free(self, pool: Pool) -> None:
        """Coalesces adjacent free blocks of one segment, as the caching allocator does."""
        free = sorted(pool.free, key=lambda b: b.address)
        merged: list[Block] = []
        for block in free:
            last = merged[-1] if merged else None
            if (
                last is not None
                and last.segment is block.segment
                and last.address + last.size == block.address
            ):
                self._unindex(block)
                joined = Block(
                    last.segment,
                    last.segment_number,
                    last.address,
                    last.size + block.size,
                    pool,
                    last.untouched or block.untouched,
                )
                self._index(joined)
                merged[-1] = joined
            else:
                merged.append(block)
        pool.free = merged

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
                if block.counted:
                    block.counted = False
                    self._live_bytes -= block.size
        if len(still_live) != len(pool.live):
            pool.live = still_live
            self._merge_free(pool)

    def release_unused(self, capturing: set[Pool]) -> None:
        """``empty_cache``: free blocks of the default pool and of pools no graph holds."""
        with self._lock:
            for pool in list(self.pools.values()):
                if pool in capturing or (pool.graph_refs > 0 and pool.id != DEFAULT_POOL_ID):
                    continue
                if pool.still_recording:
                    continue  # a capture CUDA failed keeps its memory (H200, torch 2.11)
                self._reclaim(pool)
                kept = []
                for block in pool.free:
                    if not block.whole_segment():
                        kept.append(block)  # the rest of its segment is in use
                        continue
                    self._unindex(block)
                    del self._segment_stream[block.segment_number]  # the segment is gone
                    self.quarantine.append(block.segment)
                pool.free = kept

    def stats(self) -> tuple[int, int]:
        """(allocated bytes, reserved bytes) over all pools."""
        with self._lock:
            blocks = [b for pool in self.pools.values() for b in pool.blocks()]
            allocated = sum(b.size for b in blocks if b.in_use())
            self._peak = max(self._peak, allocated)
            return allocated, sum(b.size for b in blocks)

    def peak_allocated(self) -> int:
        """The largest allocated total seen at an allocation or a statistics query."""
        return max(self._peak, self.stats()[0])

    def reset_peak(self) -> None:
        self._peak = 0
        self._peak = self.stats()[0]

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
