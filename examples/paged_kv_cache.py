"""A paged KV-cache write break op and its spec: each token's key and value go to its slot.

The semantics are those documented for vLLM's ``reshape_and_cache_flash`` (written here from
that description): ``slot_mapping[i]`` is a flat slot ``block * block_size + offset`` in a
cache of shape ``(num_blocks, block_size, num_heads, head_size)``, and a negative slot is a
padding token, for which nothing is written. The op reads the slots on the host, so it is an
eager break; it writes only the slots named, so the caches are read-modify-write buffers
written in part: ``python -m verification fuzz-op examples.paged_kv_cache:SPEC``.
"""

from __future__ import annotations

import torch

import breakable_cudagraph as bcg
from verification import BreakOpSpec, TensorArg


@bcg.eager_break_during_capture
def reshape_and_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Writes ``key[i]``/``value[i]`` into the caches at slot ``slot_mapping[i]``; a slot < 0
    (padding) writes nothing, so a batch of padding alone leaves the caches untouched."""
    block_size = key_cache.shape[1]
    capacity = key_cache.shape[0] * block_size
    # Host read. At capture the slots are garbage: skip any outside the cache, never raise.
    tokens = [i for i, slot in enumerate(slot_mapping.tolist()) if 0 <= slot < capacity]
    if not tokens:
        return
    rows = torch.tensor(tokens, device=key.device)
    slots = slot_mapping[rows]
    blocks, offsets = slots // block_size, slots % block_size
    key_cache[blocks, offsets] = key[rows]
    value_cache[blocks, offsets] = value[rows]


def written_slots(slot_mapping: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
    """The cache entries a call may write: a (num_blocks, block_size, 1, 1) mask of the slots
    that ``slot_mapping`` names (padding slots name none)."""
    num_blocks, block_size = cache.shape[:2]
    mask = torch.zeros(num_blocks * block_size, dtype=torch.bool)
    slots = slot_mapping.cpu()
    mask[slots[(slots >= 0) & (slots < num_blocks * block_size)]] = True
    return mask.reshape(num_blocks, block_size, 1, 1)


token = TensorArg(("tokens", "heads", "head_size"), (torch.float32, torch.bfloat16, torch.float16))
cache = TensorArg(("blocks", "block_size", "heads", "head_size"), "key")
SPEC = BreakOpSpec(
    fn=reshape_and_cache,
    args={
        "key": token,
        "value": TensorArg(("tokens", "heads", "head_size"), "key"),
        "key_cache": cache,
        "value_cache": cache,
        # One distinct slot per token, -1 (padding) for about a third of them.
        "slot_mapping": TensorArg(
            ("tokens",),
            torch.int64,
            low=0,
            high="blocks*block_size-1",
            unique=True,
            sentinel=-1,
            sentinel_rate=0.3,
        ),
    },
    # At least as many slots (blocks * block_size >= 8) as tokens, so slots can be distinct.
    dims={
        "tokens": (1, 8),
        "heads": (1, 2),
        "head_size": (1, 4),
        "blocks": (2, 4),
        "block_size": (4, 8),
    },
    inout=("key_cache", "value_cache"),
    partial={
        "key_cache": lambda slot_mapping, key_cache, **_: written_slots(slot_mapping, key_cache),
        "value_cache": lambda slot_mapping, value_cache, **_: written_slots(
            slot_mapping, value_cache
        ),
    },
)
