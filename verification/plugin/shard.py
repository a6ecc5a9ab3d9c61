"""Splits a fuzz budget into fixed chunks of examples, each with its own seed, and deals
the chunks out to ``n`` shards.

The chunks depend only on the budget and the base seed, never on ``n``: shard ``i`` of
``n`` takes every chunk whose index is ``i`` modulo ``n``, so the shards of any ``n`` are
disjoint and their union is exactly the unsharded plan.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from verification.errors import UsageError

# Small enough that a thorough budget spreads over many xdist workers and shards, large
# enough that hypothesis's generation phase is worth its start-up.
CHUNK_EXAMPLES = 25


@dataclass(frozen=True)
class FuzzChunk:
    """One slice of a fuzz budget: run ``examples`` hypothesis examples under ``seed``."""

    index: int
    seed: int
    examples: int


@dataclass(frozen=True)
class Shard:
    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


UNSHARDED = Shard(0, 1)


def parse_shard(text: str) -> Shard:
    """Parses ``"i/n"`` with ``0 <= i < n``; anything else is a :class:`UsageError`."""
    index, slash, count = text.partition("/")
    if slash and index.isdigit() and count.isdigit() and int(index) < int(count):
        return Shard(int(index), int(count))
    raise UsageError(f"--bcg-shard expects i/n with 0 <= i < n (e.g. 0/4), got {text!r}")


def chunk_seed(base_seed: int, index: int) -> int:
    # A hash rather than base_seed + index: neighbouring base seeds must not share chunks.
    digest = hashlib.sha256(f"{base_seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def plan(budget: int, base_seed: int = 0, chunk_examples: int = CHUNK_EXAMPLES) -> list[FuzzChunk]:
    """The whole (unsharded) run: ``budget`` examples cut into chunks of ``chunk_examples``."""
    if budget <= 0:
        return []
    count = -(-budget // chunk_examples)
    return [
        FuzzChunk(k, chunk_seed(base_seed, k), min(chunk_examples, budget - k * chunk_examples))
        for k in range(count)
    ]


def select(chunks: list[FuzzChunk], shard: Shard) -> list[FuzzChunk]:
    """The chunks shard ``shard.index`` of ``shard.count`` runs."""
    return [c for c in chunks if c.index % shard.count == shard.index]
