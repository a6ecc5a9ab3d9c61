"""Index-consuming capturable ops: gather, scatter, scatter_add, index_select, index_add, take
and advanced indexing.

Indices are never taken from the program as-is: each op derives them from a tensor input
with ``torch.remainder((t * 1000).to(torch.int64), size)`` (or a stable argsort), so they are
in range whatever the values (NaN poison or garbage included). Float index_add/scatter_add
accumulate with atomics on CUDA, so they are marked non-deterministic with a tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from verification.ops import rules
from verification.ops.spec import OpSpec, Params, TensorMeta

# Atomic float accumulation reorders a handful of additions; half precision dominates.
ATOMIC_RTOL = 1e-2
ATOMIC_ATOL = 1e-2


def indices_from(t: torch.Tensor, size: int) -> torch.Tensor:
    """In-range int64 indices derived deterministically from any tensor's values."""
    return torch.remainder((t * 1000).to(torch.int64), size)


INDICES = "torch.remainder(({src} * 1000).to(torch.int64), {size})"


def _dims_accepted_by(infer: Any) -> Any:
    """Only the dims along which the two inputs' shapes fit together."""
    return lambda metas: rules.accepted(infer, metas, rules.dim_choices(len(metas[0].shape)))


def _within_except(a: TensorMeta, b: TensorMeta, axis: int) -> bool:
    """b has a's rank and is no larger than a on every dim but ``axis``."""
    return len(a.shape) == len(b.shape) and all(
        y <= x for d, (x, y) in enumerate(zip(a.shape, b.shape)) if d != axis
    )


def _gather(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    a, b = metas
    axis = rules.ranked_dim(metas, p)
    if axis is None or not _within_except(a, b, axis):
        return None
    return TensorMeta(b.shape, a.dtype)


def _scatter(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    a, b = metas
    ok = rules.ranked_dim(metas, p) is not None and a == b and rules.is_arith(a)
    return a if ok else None


def _scatter_add(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    a, b = metas
    axis = rules.ranked_dim(metas, p)
    ok = axis is not None and _within_except(a, b, axis) and a.dtype == b.dtype
    return a if ok and rules.is_arith(a) else None


def _index_select(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    a, b = metas
    axis = rules.ranked_dim(metas, p)
    if axis is None:
        return None
    shape = (*a.shape[:axis], math.prod(b.shape), *a.shape[axis + 1 :])
    return TensorMeta(shape, a.dtype) if rules.fits(shape) else None


def _index_add(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    a, b = metas
    axis = rules.ranked_dim(metas, p)
    if axis is None or len(a.shape) != len(b.shape) or a.dtype != b.dtype:
        return None
    same_elsewhere = all(x == y for d, (x, y) in enumerate(zip(a.shape, b.shape)) if d != axis)
    return a if same_elsewhere and rules.is_arith(a) else None


def _take(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    a, b = metas
    return TensorMeta(b.shape, a.dtype)


def _advanced_index(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    a, b = metas
    # A 0-d index tensor is read on the host (``__index__``): a sync that capture forbids.
    if not a.shape or not b.shape:
        return None
    shape = (*b.shape, *a.shape[1:])
    return TensorMeta(shape, a.dtype) if rules.fits(shape) else None


def _idx(src: str, size: str) -> str:
    return INDICES.format(src=src, size=size)


OPS: list[OpSpec] = [
    OpSpec(
        "gather",
        2,
        _gather,
        f"torch.gather({{0}}, {{dim}}, {_idx('{1}', '{0}.shape[{dim}]')})",
        run=lambda a, b, *, dim: torch.gather(a, dim, indices_from(b, a.shape[dim])),
        params=_dims_accepted_by(_gather),
    ),
    OpSpec(
        "scatter",
        2,
        _scatter,
        "torch.scatter({0}, {dim}, torch.argsort({0}, dim={dim}, stable=True), {1})",
        # A per-slice permutation: no index repeats, so no write races on CUDA.
        run=lambda a, b, *, dim: torch.scatter(a, dim, torch.argsort(a, dim=dim, stable=True), b),
        params=rules.dim_param,
    ),
    OpSpec(
        "scatter_add",
        2,
        _scatter_add,
        f"torch.scatter_add({{0}}, {{dim}}, {_idx('{1}', '{0}.shape[{dim}]')}, {{1}})",
        run=lambda a, b, *, dim: torch.scatter_add(a, dim, indices_from(b, a.shape[dim]), b),
        params=_dims_accepted_by(_scatter_add),
        deterministic=False,
        rtol=ATOMIC_RTOL,
        atol=ATOMIC_ATOL,
    ),
    OpSpec(
        "index_select",
        2,
        _index_select,
        f"torch.index_select({{0}}, {{dim}}, {_idx('{1}', '{0}.shape[{dim}]')}.flatten())",
        run=lambda a, b, *, dim: torch.index_select(
            a, dim, indices_from(b, a.shape[dim]).flatten()
        ),
        params=rules.dim_param,
    ),
    OpSpec(
        "index_add",
        2,
        _index_add,
        "torch.index_add({0}, {dim}, "
        + _idx("{1}", "{0}.shape[{dim}]")
        + ".flatten()[: {1}.shape[{dim}]], {1})",
        run=lambda a, b, *, dim: torch.index_add(
            a, dim, indices_from(b, a.shape[dim]).flatten()[: b.shape[dim]], b
        ),
        params=_dims_accepted_by(_index_add),
        deterministic=False,
        rtol=ATOMIC_RTOL,
        atol=ATOMIC_ATOL,
    ),
    OpSpec(
        "take",
        2,
        _take,
        f"torch.take({{0}}, {_idx('{1}', '{0}.numel()')})",
        run=lambda a, b: torch.take(a, indices_from(b, a.numel())),
    ),
    OpSpec(
        "advanced_index",
        2,
        _advanced_index,
        f"{{0}}[{_idx('{1}', '{0}.shape[0]')}]",
        run=lambda a, b: a[indices_from(b, a.shape[0])],
    ),
]
