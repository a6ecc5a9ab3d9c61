"""Watches break arguments and scribbles freed memory, for the memory properties.

:class:`ArgumentWatch` wraps break functions (inside the target's decorator) and keeps a
weak reference to every tensor a break receives inside a capture (in containers and
dataclasses too), noting whether its memory lies in a graph pool. :func:`scribble_freed`
allocates every free block of the default allocator and of a graph pool and fills it with
``FF`` bytes (NaN, or -1), so a dangling reference reads garbage instead of the old value.
"""

from __future__ import annotations

import dataclasses
import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from verification.causes import forwarder
from verification.devices import DeviceKind
from verification.execute import collector_paused
from verification.properties.runs import DEFAULT_POOL, in_graph_pool


@dataclass
class Watched:
    ref: weakref.ref[torch.Tensor]
    nbytes: int
    address: int
    in_pool: bool


class ArgumentWatch:
    """Weak references to the tensors breaks received while ``active``."""

    def __init__(self) -> None:
        self.active = False
        self.seen: list[Watched] = []

    def hook(self, index: int, env: dict[int, torch.Tensor], last: int) -> None:
        self.active = index < last

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        @forwarder
        def watched(*args: Any, **kwargs: Any) -> Any:
            if self.active:
                for t in _tensors((args, kwargs)):
                    if t.untyped_storage().nbytes() > 0:
                        storage = t.untyped_storage()
                        self.seen.append(
                            Watched(
                                weakref.ref(t),
                                storage.nbytes(),
                                storage.data_ptr(),
                                in_graph_pool(t),
                            )
                        )
            return fn(*args, **kwargs)

        return watched

    def alive(self, exclude: set[int] = frozenset(), pool_only: bool = False) -> list[Watched]:
        """Watched tensors still alive, minus those whose storage address is in ``exclude``."""
        return [
            w
            for w in self.seen
            if w.ref() is not None and w.address not in exclude and (w.in_pool or not pool_only)
        ]


def _tensors(tree: Any) -> list[torch.Tensor]:
    """The tensors in ``tree``, through tuples, lists, dicts and dataclass instances (torch's
    pytree does not open dataclasses, and a break may take its tensors in one)."""
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, (tuple, list)):
        items: Any = tree
    elif isinstance(tree, dict):
        items = tree.values()
    elif dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        items = [getattr(tree, f.name) for f in dataclasses.fields(tree)]
    else:
        return []
    return [t for item in items for t in _tensors(item)]


def held_bytes(watched: list[Watched]) -> int:
    return sum({w.address: w.nbytes for w in watched}.values())


def _free_blocks(segment: dict[str, Any]) -> list[int]:
    blocks = segment.get("blocks")
    if blocks is None:  # the simulator reports one block per segment
        return [int(segment["total_size"])] if not segment.get("allocated_size") else []
    return [int(b["size"]) for b in blocks if b.get("state") == "inactive"]


def _poisoned(sizes: list[int], device: str) -> list[torch.Tensor]:
    return [torch.empty(size, dtype=torch.uint8, device=device).fill_(255) for size in sizes]


def scribble_freed(pool: Any, kind: DeviceKind, device: str) -> None:
    """Fills the free blocks of the default allocator and of graph pool ``pool`` with FF."""
    torch.cuda.synchronize()
    segments = torch.cuda.memory_snapshot()
    held: list[torch.Tensor] = []
    for segment in segments:
        if tuple(segment.get("segment_pool_id") or DEFAULT_POOL) != DEFAULT_POOL:
            continue
        sizes = _free_blocks(segment)
        if kind == "cuda" and sizes:
            # A freed block serves only allocations on the stream it was freed from.
            with torch.cuda.stream(torch.cuda.ExternalStream(segment["stream"])):
                held += _poisoned(sizes, device)
        else:
            held += _poisoned(sizes, device)
    pool_sizes = [
        size
        for segment in segments
        if tuple(segment.get("segment_pool_id") or DEFAULT_POOL) == tuple(pool)
        for size in _free_blocks(segment)
    ]
    torch.cuda.synchronize()
    del held
    if not pool_sizes:
        return
    # Pool memory is only handed out inside a capture into the pool: a throwaway graph
    # allocates the free blocks and fills them at its single replay.
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), collector_paused():
        graph.capture_begin(pool=pool)
        try:
            filled = _poisoned(pool_sizes, device)
        finally:
            graph.capture_end()
        del filled
        graph.replay()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph.reset()
