"""Planted engine ops whose fault only shows against how a graph replays them: a cache keyed
on version counters (replayed kernels never bump them), a side stream that starts before the
caller's work is done, an answer that changes from run to run, a count of calls kept in the
module, and a workspace built for the first call's dtype.

Each faulty spec has a twin ``*_CORRECT`` doing the same job right, which must pass.
"""

from __future__ import annotations

import random

import torch
from hypothesis import strategies as st

from verification import BreakOpSpec, TensorArg

# ---- blocks per request, from host lengths cached while the tensor "did not change" --------

BLOCK = 4
_SEEN: dict[str, tuple[int, int, list[int]]] = {}


def _lengths(lens: torch.Tensor) -> list[int]:
    # Lengths at capture are garbage: clamp them to what a request may hold.
    return lens.clamp(0, 1 << 16).tolist()


def _lengths_cached(lens: torch.Tensor) -> list[int]:
    key = (id(lens), lens._version)
    cached = _SEEN.get("lens")
    if cached is None or cached[:2] != key:
        cached = (*key, _lengths(lens))
        _SEEN["lens"] = cached
    return cached[2]


def blocks_needed_cached(lens: torch.Tensor, blocks: torch.Tensor) -> None:
    blocks.fill_(sum(-(-n // BLOCK) for n in _lengths_cached(lens)))


def blocks_needed(lens: torch.Tensor, blocks: torch.Tensor) -> None:
    blocks.fill_(sum(-(-n // BLOCK) for n in _lengths(lens)))


def _blocks_spec(fn) -> BreakOpSpec:
    return BreakOpSpec(
        fn=fn,
        args={
            "lens": TensorArg(("batch",), torch.int64, low=1, high=40),
            "blocks": TensorArg((1,), torch.int64),
        },
        dims={"batch": (1, 6)},
        writes=("blocks",),
    )


BLOCKS_VERSION_CACHED = _blocks_spec(blocks_needed_cached)
BLOCKS_CORRECT = _blocks_spec(blocks_needed)

# ---- scaling on a side stream, to overlap the caller's next segment -------------------------

_SIDE: list[torch.cuda.Stream] = []


def _side() -> torch.cuda.Stream:
    if not _SIDE:
        _SIDE.append(torch.cuda.Stream())
    return _SIDE[0]


def scale_on_side_stream_unordered(hidden: torch.Tensor, scaled: torch.Tensor) -> None:
    side = _side()
    with torch.cuda.stream(side):
        scaled.copy_(hidden * 0.5)
    torch.cuda.current_stream().wait_stream(side)


def scale_on_side_stream(hidden: torch.Tensor, scaled: torch.Tensor) -> None:
    side = _side()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        scaled.copy_(hidden * 0.5)
    torch.cuda.current_stream().wait_stream(side)


def _scale_spec(fn) -> BreakOpSpec:
    return BreakOpSpec(
        fn=fn,
        args={
            "hidden": TensorArg(("tokens", "width"), torch.float32),
            "scaled": TensorArg(("tokens", "width"), torch.float32),
        },
        dims={"tokens": (1, 4), "width": (1, 8)},
        writes=("scaled",),
    )


SIDE_STREAM_UNORDERED = _scale_spec(scale_on_side_stream_unordered)
SIDE_STREAM_CORRECT = _scale_spec(scale_on_side_stream)

# ---- greedy pick among tied scores ---------------------------------------------------------

_TIES = random.Random()


def pick_best_random_tie(scores: torch.Tensor, picked: torch.Tensor) -> None:
    rows = scores.tolist()
    choice = []
    for row in rows:
        best = max(row)
        choice.append(_TIES.choice([i for i, v in enumerate(row) if v == best]))
    picked.copy_(torch.tensor(choice, dtype=picked.dtype))


def pick_best_first_tie(scores: torch.Tensor, picked: torch.Tensor) -> None:
    rows = scores.tolist()
    picked.copy_(torch.tensor([row.index(max(row)) for row in rows], dtype=picked.dtype))


def _pick_spec(fn) -> BreakOpSpec:
    return BreakOpSpec(
        fn=fn,
        args={
            # Few distinct values: ties in most rows.
            "scores": TensorArg(("batch", "choices"), torch.int32, low=0, high=1),
            "picked": TensorArg(("batch",), torch.int64),
        },
        dims={"batch": (2, 6), "choices": (3, 6)},
        writes=("picked",),
    )


PICK_RANDOM_TIE = _pick_spec(pick_best_random_tie)
PICK_CORRECT = _pick_spec(pick_best_first_tie)

# ---- a temperature that decays with the decode step ----------------------------------------

_STEP = {"n": 0}


def decay_by_module_step(logits: torch.Tensor) -> None:
    logits.mul_(1.0 / (1 + _STEP["n"]))
    _STEP["n"] += 1


def decay_by_passed_step(logits: torch.Tensor, step: torch.Tensor) -> None:
    logits.div_(1 + step.to(logits.dtype))
    step.add_(1)


STEP_IN_MODULE = BreakOpSpec(
    fn=decay_by_module_step,
    args={"logits": TensorArg(("batch", "vocab"), torch.float32)},
    dims={"batch": (1, 4), "vocab": (1, 8)},
    inout=("logits",),
)
STEP_CORRECT = BreakOpSpec(
    fn=decay_by_passed_step,
    args={
        "logits": TensorArg(("batch", "vocab"), torch.float32),
        "step": TensorArg((1,), torch.int64, low=0, high=9),
    },
    dims={"batch": (1, 4), "vocab": (1, 8)},
    inout=("logits", "step"),
)

# ---- log-softmax through a workspace kept per shape ----------------------------------------

_WORKSPACE: dict[tuple[int, ...], torch.Tensor] = {}


def _workspace(like: torch.Tensor, *, by_dtype: bool) -> torch.Tensor:
    key = (*like.shape, *((like.dtype.itemsize,) if by_dtype else ()))
    if key not in _WORKSPACE:
        _WORKSPACE[key] = torch.empty(like.shape, dtype=like.dtype, device=like.device)
    return _WORKSPACE[key]


def log_softmax_workspace_by_shape(x: torch.Tensor, out: torch.Tensor, *, dim: int) -> None:
    ws = _workspace(x, by_dtype=False)
    ws.copy_(x)
    ws.sub_(ws.amax(dim=dim, keepdim=True))
    out.copy_(ws - ws.exp().sum(dim=dim, keepdim=True).log())


def log_softmax_workspace(x: torch.Tensor, out: torch.Tensor, *, dim: int) -> None:
    ws = torch.empty_like(x)
    ws.copy_(x)
    ws.sub_(ws.amax(dim=dim, keepdim=True))
    out.copy_(ws - ws.exp().sum(dim=dim, keepdim=True).log())


def _softmax_spec(fn) -> BreakOpSpec:
    return BreakOpSpec(
        fn=fn,
        args={
            "x": TensorArg(("rows", "cols"), (torch.float16, torch.float32)),
            "out": TensorArg(("rows", "cols"), "x"),
        },
        dims={"rows": (1, 2), "cols": (4, 4)},
        writes=("out",),
        params={"dim": st.sampled_from([-1])},
    )


WORKSPACE_BY_SHAPE = _softmax_spec(log_softmax_workspace_by_shape)
WORKSPACE_CORRECT = _softmax_spec(log_softmax_workspace)

CORRECT = (
    "BLOCKS_CORRECT",
    "SIDE_STREAM_CORRECT",
    "PICK_CORRECT",
    "STEP_CORRECT",
    "WORKSPACE_CORRECT",
)
