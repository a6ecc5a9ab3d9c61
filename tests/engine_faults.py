"""Planted engine ops with faults that need more than one call on contiguous values to show:
a strided argument, a value made by the graph before the break, an alias that varies, state
kept at the first call's batch size, and a write to part of a declared output.

``PLANTED`` maps each faulty spec to what ``fuzz-op`` must say of it (the part or the words
that name the fault); each ``*_CORRECT`` spec is the same op done right, which must pass.
"""

from __future__ import annotations

import torch

from verification import BreakOpSpec, TensorArg

# ---- rotary embedding: q and k come as column slices of one fused qkv buffer --------------


def _rotate(x: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor) -> torch.Tensor:
    """``x`` (tokens, heads, head_size) rotated by each token's angle (neox style)."""
    half = cos_sin_cache.shape[-1] // 2
    # Positions at capture are garbage: clamp them into the cache.
    rows = cos_sin_cache[positions.clamp(0, cos_sin_cache.shape[0] - 1)]
    cos, sin = rows[:, None, :half], rows[:, None, half:]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def rotary_on_reshaped_copy(
    positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, cos_sin_cache: torch.Tensor
) -> None:
    head_size = cos_sin_cache.shape[-1]
    for x in (query, key):
        # reshape copies a strided view: the rotation lands in the copy and is lost.
        flat = x.reshape(-1, head_size)
        flat.copy_(
            _rotate(flat.unflatten(0, (x.shape[0], -1)), positions, cos_sin_cache).flatten(0, 1)
        )


def rotary_in_place(
    positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, cos_sin_cache: torch.Tensor
) -> None:
    for x in (query, key):
        x.copy_(_rotate(x, positions, cos_sin_cache))  # writes through whatever view x is


def _rotary_spec(fn) -> BreakOpSpec:
    heads = TensorArg(("tokens", "heads", "2*half"), torch.float32)
    return BreakOpSpec(
        fn=fn,
        args={
            "positions": TensorArg(("tokens",), torch.int64, low=0, high="max_position-1"),
            "query": heads,
            "key": heads,
            "cos_sin_cache": TensorArg(("max_position", "2*half"), torch.float32, contiguous=True),
        },
        dims={"tokens": (1, 6), "heads": (1, 2), "half": (1, 3), "max_position": (1, 8)},
        inout=("query", "key"),
        rtol=1e-5,
        atol=1e-5,
    )


ROTARY_RESHAPE = _rotary_spec(rotary_on_reshaped_copy)
ROTARY_CORRECT = _rotary_spec(rotary_in_place)

# ---- slot mapping sized by a count that the graph before the break computes ---------------


def slot_mapping_by_count(num_scheduled: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    # At capture num_scheduled holds garbage: the allocation is sized by it.
    requests = torch.arange(num_scheduled.numel(), device=num_scheduled.device)
    owner = torch.repeat_interleave(requests, num_scheduled)
    slot_mapping.fill_(-1)
    slot_mapping[: owner.numel()] = owner


def slot_mapping_clamped(num_scheduled: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    requests = torch.arange(num_scheduled.numel(), device=num_scheduled.device)
    owner = torch.repeat_interleave(requests, num_scheduled.clamp(0, 2))
    slot_mapping.fill_(-1)
    slot_mapping[: owner.numel()] = owner


def _slot_spec(fn) -> BreakOpSpec:
    return BreakOpSpec(
        fn=fn,
        args={
            "num_scheduled": TensorArg(("requests",), torch.int64, low=0, high=2),
            "slot_mapping": TensorArg(("2*requests",), torch.int64),
        },
        dims={"requests": (1, 4)},
        writes=("slot_mapping",),
    )


SLOTS_BY_CAPTURED_COUNT = _slot_spec(slot_mapping_by_count)
SLOTS_CORRECT = _slot_spec(slot_mapping_clamped)

# ---- grammar bitmask: the logits themselves on some calls, a new tensor on others ---------


def bitmask_returning_input(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    if bool(allowed.all()):
        return logits  # no row constrained: the input itself
    return logits.masked_fill(~allowed, float("-inf"))


def bitmask_always_new(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    return logits.masked_fill(~allowed, float("-inf"))


def _bitmask_spec(fn) -> BreakOpSpec:
    return BreakOpSpec(
        fn=fn,
        args={
            "logits": TensorArg(("batch", "vocab"), torch.float32),
            "allowed": TensorArg(("batch", "vocab"), torch.bool),
        },
        dims={"batch": (1, 2), "vocab": (1, 3)},
        returns=TensorArg(("batch", "vocab"), "logits"),
    )


BITMASK_ALIAS_VARIES = _bitmask_spec(bitmask_returning_input)
BITMASK_CORRECT = _bitmask_spec(bitmask_always_new)

# ---- beam search: row offsets built once, at the first call's batch size ------------------

_OFFSETS: dict[str, torch.Tensor] = {}


def beam_step_cached_offsets(scores: torch.Tensor, done: torch.Tensor, best: torch.Tensor) -> None:
    batch, beams = scores.shape
    offsets = _OFFSETS.setdefault("rows", torch.arange(batch, device=scores.device) * beams)
    rows = offsets[:batch]  # shorter than the batch once a larger batch follows a smaller one
    best.copy_(torch.where(done.bool(), -1, scores.argmax(1) + rows))


def beam_step(scores: torch.Tensor, done: torch.Tensor, best: torch.Tensor) -> None:
    batch, beams = scores.shape
    rows = torch.arange(batch, device=scores.device) * beams
    best.copy_(torch.where(done.bool(), -1, scores.argmax(1) + rows))


def _beam_spec(fn) -> BreakOpSpec:
    return BreakOpSpec(
        fn=fn,
        args={
            "scores": TensorArg(("batch", "beams"), torch.float32),
            "done": TensorArg(("batch",), torch.int64, low=0, high=1),
            "best": TensorArg(("batch",), torch.int64),
        },
        dims={"batch": (1, 6), "beams": (1, 3)},
        writes=("best",),
    )


BEAM_OFFSETS_ONCE = _beam_spec(beam_step_cached_offsets)
BEAM_CORRECT = _beam_spec(beam_step)

# ---- paged KV-cache write declared as overwriting the whole cache --------------------------


def write_slots(key: torch.Tensor, slots: torch.Tensor, kv_cache: torch.Tensor) -> None:
    valid = (slots >= 0) & (slots < kv_cache.shape[0])  # -1 pads; garbage at capture
    kv_cache.index_copy_(0, slots[valid], key[valid])


def _kv_spec(**declared) -> BreakOpSpec:
    return BreakOpSpec(
        fn=write_slots,
        args={
            "key": TensorArg(("tokens", "head_size"), torch.float32),
            "slots": TensorArg(
                ("tokens",), torch.int64, low=0, high="slots-1", unique=True, sentinel=-1
            ),
            "kv_cache": TensorArg(("slots", "head_size"), torch.float32),
        },
        dims={"tokens": (1, 4), "slots": (4, 8), "head_size": (1, 3)},
        **declared,
    )


def slot_rows(slots: torch.Tensor, kv_cache: torch.Tensor, **_: object) -> torch.Tensor:
    """A (slots, 1) mask: True on the cache rows the valid slots name."""
    mask = torch.zeros(kv_cache.shape[0], 1, dtype=torch.bool)
    valid = slots.cpu()
    return mask.index_fill_(0, valid[(valid >= 0) & (valid < kv_cache.shape[0])], True)


KV_WRITE_DECLARED_WHOLE = _kv_spec(writes=("kv_cache",))
KV_WRITE_CORRECT = _kv_spec(inout=("kv_cache",), partial={"kv_cache": slot_rows})

CORRECT = ("ROTARY_CORRECT", "SLOTS_CORRECT", "BITMASK_CORRECT", "BEAM_CORRECT", "KV_WRITE_CORRECT")
