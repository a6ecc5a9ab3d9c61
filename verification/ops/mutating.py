"""Capturable ops that write into a tensor input: in-place methods (``add_``, ``copy_``,
``fill_``...; ``mutates=(0,)``) and ``out=`` variants (``torch.add(a, b, out=c)``).

Each returns its destination. The destination's shape never changes: the other inputs
must broadcast to it, and the computed dtype must be castable to its dtype (torch's
``can_cast``), exactly where torch would accept the call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis import strategies as st

from verification.ops import rules
from verification.ops.spec import OpSpec, Params, TensorMeta

Accepts = Callable[[TensorMeta], bool]


def _casts_to_anything(dtype: torch.dtype) -> torch.dtype:
    # copy_ converts between any dtypes; bool is the dtype torch can cast to every other.
    return torch.bool


def _writes_into(dest: TensorMeta, others: Sequence[TensorMeta], computed: torch.dtype) -> bool:
    shapes_ok = all(rules.broadcasts_to(m.shape, dest.shape) for m in others)
    return shapes_ok and torch.can_cast(computed, dest.dtype)


def in_place(
    name: str,
    arity: int,
    run: Callable[..., torch.Tensor],
    expr: str,
    accepts: Accepts,
    result: Callable[[torch.dtype], torch.dtype] = rules.same_dtype,
    params: Any = None,
) -> OpSpec:
    """``inputs[0].<op>_(*inputs[1:])``: the value computed from all inputs lands in input 0."""

    def infer(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
        if not all(accepts(m) for m in metas):
            return None
        dest = metas[0]
        return dest if _writes_into(dest, metas[1:], result(rules.promote(*metas))) else None

    extra = {"params": params} if params else {}
    return OpSpec(name, arity, infer, expr, run=run, aliasing="inplace", mutates=(0,), **extra)


def out_variant(
    name: str,
    arity: int,
    run: Callable[..., torch.Tensor],
    expr: str,
    accepts: Accepts,
    result: Callable[[torch.dtype], torch.dtype] = rules.same_dtype,
) -> OpSpec:
    """An elementwise op whose last input is its ``out=`` destination."""

    def infer(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
        *sources, dest = metas
        if not all(accepts(m) for m in sources):
            return None
        if rules.broadcast(*(m.shape for m in sources)) != dest.shape:
            return None
        return dest if torch.can_cast(result(rules.promote(*sources)), dest.dtype) else None

    return OpSpec(name, arity, infer, expr, run=run, aliasing="out", mutates=(arity - 1,))


def _bounds(metas: Sequence[TensorMeta]) -> st.SearchStrategy[dict[str, Any]]:
    bounds = st.sampled_from([-2.0, -0.5, 0.0, 0.5, 1.0, 3.0])
    return st.tuples(bounds, bounds).map(lambda b: {"lo": min(b), "hi": max(b)})


def _value(metas: Sequence[TensorMeta]) -> st.SearchStrategy[dict[str, Any]]:
    values = {torch.bool: [True, False], torch.int64: [0, 7, -3]}.get(
        metas[0].dtype, [0.0, -1.5, 2.0]
    )
    return st.fixed_dictionaries({"value": st.sampled_from(values)})


def _masked_fill_(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    x, mask = metas
    ok = rules.is_bool(mask) and rules.broadcasts_to(mask.shape, x.shape)
    return x if ok else None


def _mm_out(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    a, b, c = metas
    ok = len(a.shape) == len(b.shape) == 2 and a.shape[1] == b.shape[0]
    ok = ok and c.shape == (a.shape[0], b.shape[1]) and rules.is_float(a)
    return c if ok and a.dtype == b.dtype == c.dtype else None


def _sum_out(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    a, c = metas
    shape = rules.reduced(a.shape, p.get("dim", -1), p.get("keepdim", False))
    return c if rules.is_float(a) and c == TensorMeta(shape, a.dtype) else None


def _sum_out_params(metas: Sequence[TensorMeta]) -> st.SearchStrategy[dict[str, Any]]:
    return rules.accepted(_sum_out, metas, rules.dim_choices(len(metas[0].shape), keepdim=True))


fl, ar = rules.is_float, rules.is_arith

OPS: list[OpSpec] = [
    in_place(
        "add_",
        2,
        lambda a, b, *, alpha: a.add_(b, alpha=alpha),
        "{0}.add_({1}, alpha={alpha})",
        ar,
        params=rules.alpha_param,
    ),
    in_place(
        "sub_",
        2,
        lambda a, b, *, alpha: a.sub_(b, alpha=alpha),
        "{0}.sub_({1}, alpha={alpha})",
        ar,
        params=rules.alpha_param,
    ),
    in_place("mul_", 2, lambda a, b: a.mul_(b), "{0}.mul_({1})", ar),
    in_place("div_", 2, lambda a, b: a.div_(b), "{0}.div_({1})", ar, rules.float_result),
    in_place(
        "copy_", 2, lambda a, b: a.copy_(b), "{0}.copy_({1})", rules.any_meta, _casts_to_anything
    ),
    in_place("exp_", 1, lambda a: a.exp_(), "{0}.exp_()", fl),
    in_place("tanh_", 1, lambda a: a.tanh_(), "{0}.tanh_()", fl),
    in_place("neg_", 1, lambda a: a.neg_(), "{0}.neg_()", ar),
    in_place("zero_", 1, lambda a: a.zero_(), "{0}.zero_()", rules.any_meta),
    in_place(
        "clamp_",
        1,
        lambda a, *, lo, hi: a.clamp_(min=lo, max=hi),
        "{0}.clamp_(min={lo}, max={hi})",
        fl,
        params=_bounds,
    ),
    in_place(
        "fill_",
        1,
        lambda a, *, value: a.fill_(value),
        "{0}.fill_({value})",
        rules.any_meta,
        params=_value,
    ),
    OpSpec(
        "masked_fill_",
        2,
        _masked_fill_,
        "{0}.masked_fill_({1}, {value})",
        run=lambda a, mask, *, value: a.masked_fill_(mask, value),
        params=_value,
        aliasing="inplace",
        mutates=(0,),
    ),
    out_variant(
        "add_out", 3, lambda a, b, c: torch.add(a, b, out=c), "torch.add({0}, {1}, out={2})", ar
    ),
    out_variant(
        "mul_out", 3, lambda a, b, c: torch.mul(a, b, out=c), "torch.mul({0}, {1}, out={2})", ar
    ),
    out_variant("exp_out", 2, lambda a, c: torch.exp(a, out=c), "torch.exp({0}, out={1})", fl),
    OpSpec(
        "mm_out",
        3,
        _mm_out,
        "torch.mm({0}, {1}, out={2})",
        run=lambda a, b, c: torch.mm(a, b, out=c),
        aliasing="out",
        mutates=(2,),
    ),
    OpSpec(
        "sum_out",
        2,
        _sum_out,
        "torch.sum({0}, dim={dim}, keepdim={keepdim}, out={1})",
        run=lambda a, c, *, dim, keepdim: torch.sum(a, dim=dim, keepdim=keepdim, out=c),
        params=_sum_out_params,
        aliasing="out",
        mutates=(1,),
    ),
]
