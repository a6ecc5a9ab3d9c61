"""Matrix-product capturable ops: matmul (with torch's batching rules), mm, bmm, linear, addmm,
baddbmm and outer.

All of them take floating tensors of one dtype (integer GEMMs are missing on CUDA). They are
deterministic on one GPU, so replay is compared bitwise like any other op.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from verification.ops import rules
from verification.ops.spec import OpSpec, Params, TensorMeta


def _floats_of_one_dtype(metas: Sequence[TensorMeta]) -> bool:
    return all(rules.is_float(m) for m in metas) and len({m.dtype for m in metas}) == 1


def _checked(metas: Sequence[TensorMeta], shape: tuple[int, ...] | None) -> TensorMeta | None:
    if shape is None or not _floats_of_one_dtype(metas) or not rules.fits(shape):
        return None
    return TensorMeta(shape, metas[0].dtype)


def _matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """torch.matmul: 1-d operands gain (then lose) a unit dim; batch dims broadcast."""
    if not a or not b:
        return None
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        return None
    batch = rules.broadcast(a2[:-2], b2[:-2])
    if batch is None:
        return None
    rows = () if len(a) == 1 else (a2[-2],)
    cols = () if len(b) == 1 else (b2[-1],)
    return (*batch, *rows, *cols)


def _matmul(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    a, b = metas
    return _checked(metas, _matmul_shape(a.shape, b.shape))


def _mm(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    a, b = metas
    ok = len(a.shape) == len(b.shape) == 2 and a.shape[1] == b.shape[0]
    return _checked(metas, (a.shape[0], b.shape[1]) if ok else None)


def _bmm(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    a, b = metas
    ok = len(a.shape) == len(b.shape) == 3 and a.shape[0] == b.shape[0] and a.shape[2] == b.shape[1]
    return _checked(metas, (*a.shape[:2], b.shape[2]) if ok else None)


def _linear(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    x, w = metas[:2]
    ok = len(x.shape) >= 1 and len(w.shape) == 2 and x.shape[-1] == w.shape[1]
    if len(metas) == 3:
        ok = ok and metas[2].shape == (w.shape[0],)
    return _checked(metas, (*x.shape[:-1], w.shape[0]) if ok else None)


def _plus_input(product: Any) -> Any:
    """addmm/baddbmm: the first input must broadcast to the product of the other two."""

    def infer(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
        out = product(metas[1:], p)
        if out is None or not rules.broadcasts_to(metas[0].shape, out.shape):
            return None
        return _checked(metas, out.shape)

    return infer


def _outer(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    a, b = metas
    ok = len(a.shape) == len(b.shape) == 1
    return _checked(metas, (a.shape[0], b.shape[0]) if ok else None)


def _scales(metas: Sequence[TensorMeta]) -> st.SearchStrategy[dict[str, Any]]:
    scale = st.sampled_from([1.0, 0.5, -1.0])
    return st.fixed_dictionaries({"beta": st.sampled_from([0.0, 1.0, 0.5]), "alpha": scale})


OPS: list[OpSpec] = [
    OpSpec("matmul", 2, _matmul, "torch.matmul({0}, {1})", run=lambda a, b: torch.matmul(a, b)),
    OpSpec("mm", 2, _mm, "torch.mm({0}, {1})", run=lambda a, b: torch.mm(a, b)),
    OpSpec("bmm", 2, _bmm, "torch.bmm({0}, {1})", run=lambda a, b: torch.bmm(a, b)),
    OpSpec(
        "linear",
        2,
        _linear,
        "torch.nn.functional.linear({0}, {1})",
        run=lambda x, w: F.linear(x, w),
    ),
    OpSpec(
        "linear_bias",
        3,
        _linear,
        "torch.nn.functional.linear({0}, {1}, {2})",
        run=lambda x, w, b: F.linear(x, w, b),
    ),
    OpSpec(
        "addmm",
        3,
        _plus_input(_mm),
        "torch.addmm({0}, {1}, {2}, beta={beta}, alpha={alpha})",
        run=lambda c, a, b, *, beta, alpha: torch.addmm(c, a, b, beta=beta, alpha=alpha),
        params=_scales,
    ),
    OpSpec(
        "baddbmm",
        3,
        _plus_input(_bmm),
        "torch.baddbmm({0}, {1}, {2}, beta={beta}, alpha={alpha})",
        run=lambda c, a, b, *, beta, alpha: torch.baddbmm(c, a, b, beta=beta, alpha=alpha),
        params=_scales,
    ),
    OpSpec("outer", 2, _outer, "torch.outer({0}, {1})", run=lambda a, b: torch.outer(a, b)),
]
