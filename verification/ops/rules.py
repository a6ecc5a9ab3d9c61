"""Shared shape, dtype and parameter rules that the op modules build their ``infer`` on.

Every rule is a pure function of :class:`TensorMeta` values (shapes and dtypes only) that
mirrors torch's own behaviour (broadcasting, type promotion, dim wrapping, reductions),
returning ``None`` where torch would raise. Param strategies here only draw valid values.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from hypothesis import strategies as st

from verification.ops.spec import TensorMeta

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
# Growth guards: ops that enlarge tensors (cat, stack, expand, outer...) refuse to build
# anything bigger, so random programs stay cheap on the CPU simulator.
MAX_NDIM = 6
MAX_NUMEL = 4096

Shape = tuple[int, ...]


def any_meta(m: TensorMeta) -> bool:
    """Accepts every input."""
    return True


def same_dtype(dtype: torch.dtype) -> torch.dtype:
    """The result dtype is the input's."""
    return dtype


def to_bool(dtype: torch.dtype) -> torch.dtype:
    """The result is bool whatever the input (comparisons, any/all)."""
    return torch.bool


def is_float(m: TensorMeta) -> bool:
    return m.dtype in FLOATS


def is_bool(m: TensorMeta) -> bool:
    return m.dtype == torch.bool


def is_arith(m: TensorMeta) -> bool:
    """Numbers torch does arithmetic on (bool is rejected by sub/neg and friends)."""
    return m.dtype != torch.bool


def fits(shape: Sequence[int]) -> bool:
    return len(shape) <= MAX_NDIM and 0 < math.prod(shape) <= MAX_NUMEL


def broadcast(*shapes: Sequence[int]) -> Shape | None:
    """torch's broadcasting of shapes, or None where they do not broadcast."""
    ndim = max(len(s) for s in shapes)
    out = []
    for axis in range(-ndim, 0):
        sizes = {s[axis] for s in shapes if len(s) >= -axis} - {1}
        if len(sizes) > 1:
            return None
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def broadcasts_to(shape: Sequence[int], target: Sequence[int]) -> bool:
    return broadcast(shape, target) == tuple(target)


def promote(*metas: TensorMeta) -> torch.dtype:
    """torch's result dtype for an elementwise op over these tensors."""
    # Type promotion only looks at dtype and whether a tensor is zero-dimensional, and the
    # generator asks about the same few combinations for every argument tuple it tries.
    return _promote(tuple((m.dtype, len(m.shape) > 0) for m in metas))


@functools.cache
def _promote(operands: tuple[tuple[torch.dtype, bool], ...]) -> torch.dtype:
    def stand_in(dtype: torch.dtype, has_dims: bool) -> torch.Tensor:
        return torch.empty((1,) * has_dims, dtype=dtype, device="meta")

    result = stand_in(*operands[0])
    for dtype, has_dims in operands[1:]:
        promoted = torch.result_type(result, stand_in(dtype, has_dims))
        result = stand_in(promoted, result.dim() > 0 or has_dims)
    return result.dtype


def float_result(dtype: torch.dtype) -> torch.dtype:
    """The dtype of true division and other ops that turn integers into floats."""
    return dtype if dtype in FLOATS else torch.get_default_dtype()


def wrap_dim(dim: int, ndim: int) -> int | None:
    """The non-negative axis ``dim`` names, or None; 0-d tensors accept dims 0 and -1."""
    rank = max(ndim, 1)
    return dim % rank if -rank <= dim < rank else None


def reduced(shape: Shape, dim: int, keepdim: bool) -> Shape | None:
    axis = wrap_dim(dim, len(shape))
    if axis is None:
        return None
    if not shape:
        return ()
    if keepdim:
        return (*shape[:axis], 1, *shape[axis + 1 :])
    return shape[:axis] + shape[axis + 1 :]


def dims(ndim: int) -> st.SearchStrategy[int]:
    rank = max(ndim, 1)
    return st.integers(-rank, rank - 1)


def dim_param(metas: Sequence[TensorMeta]) -> st.SearchStrategy[dict[str, Any]]:
    """``{"dim": d}`` for any valid dim of the first input."""
    return st.fixed_dictionaries({"dim": dims(len(metas[0].shape))})


def ranked_dim(metas: Sequence[TensorMeta], p: Mapping[str, Any]) -> int | None:
    """The wrapped ``dim`` param when the first input has at least one dim, else None."""
    ndim = len(metas[0].shape)
    return wrap_dim(p.get("dim", -1), ndim) if ndim else None


def alpha_param(metas: Sequence[TensorMeta]) -> st.SearchStrategy[dict[str, Any]]:
    """An ``alpha`` of the promoted dtype's kind: integer inputs reject a float alpha."""
    integral = promote(*metas) not in FLOATS
    return st.fixed_dictionaries(
        {"alpha": st.sampled_from([1, 2, -1] if integral else [1.0, 0.5, -2.0])}
    )


def size_at(shape: Shape, dim: int) -> int:
    """Size of ``dim`` where a 0-d tensor counts as one element along its only axis."""
    return shape[dim] if shape else 1


def accepted(
    infer: Callable[[Sequence[TensorMeta], Mapping[str, Any]], Any],
    metas: Sequence[TensorMeta],
    choices: Sequence[dict[str, Any]],
) -> st.SearchStrategy[dict[str, Any]]:
    """The choices ``infer`` accepts for these metas (all of them if it accepts none)."""
    ok = [c for c in choices if infer(metas, c) is not None]
    return st.sampled_from(ok or list(choices))


def dim_choices(ndim: int, keepdim: bool = False) -> list[dict[str, Any]]:
    rank = max(ndim, 1)
    flags = (False, True) if keepdim else (None,)
    return [
        {"dim": d} if k is None else {"dim": d, "keepdim": k}
        for d in range(-rank, rank)
        for k in flags
    ]
