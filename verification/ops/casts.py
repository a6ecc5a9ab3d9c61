"""Dtype casts between the catalog's dtypes (float32, float16, bfloat16, int64, bool).

A cast to the dtype a tensor already has returns the tensor itself (an alias), so every
cast here only applies, and only draws a target, when the dtype actually changes; the
output is then always a fresh tensor of the input's shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from hypothesis import strategies as st

from verification.ops.spec import OpSpec, Params, TensorMeta

CAST_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool)


def _targets(metas: Sequence[TensorMeta]) -> st.SearchStrategy[dict[str, Any]]:
    others = [d for d in CAST_DTYPES if d != metas[0].dtype]
    return st.sampled_from(others).map(lambda d: {"dtype": d})


def _to_dtype(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    (m,) = metas
    target = p.get("dtype", torch.float16 if m.dtype == torch.float32 else torch.float32)
    return TensorMeta(m.shape, target) if target != m.dtype else None


def _method(name: str, dtype: torch.dtype) -> OpSpec:
    """``x.float()`` and friends: a fixed target dtype."""

    def infer(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
        return TensorMeta(metas[0].shape, dtype) if metas[0].dtype != dtype else None

    return OpSpec(name, 1, infer, f"{{0}}.{name}()", run=lambda a: getattr(a, name)())


def _type_as(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    a, b = metas
    return TensorMeta(a.shape, b.dtype) if a.dtype != b.dtype else None


OPS: list[OpSpec] = [
    OpSpec(
        "to_dtype",
        1,
        _to_dtype,
        "{0}.to({dtype})",
        run=lambda a, *, dtype: a.to(dtype),
        params=_targets,
    ),
    _method("float", torch.float32),
    _method("half", torch.float16),
    _method("bfloat16", torch.bfloat16),
    _method("long", torch.int64),
    _method("bool", torch.bool),
    OpSpec("type_as", 2, _type_as, "{0}.type_as({1})", run=lambda a, b: a.type_as(b)),
]
