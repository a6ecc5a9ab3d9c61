"""Elementwise capturable ops: unary maths, broadcasting binary/ternary ops, comparisons.

Each row names the op, the callable, the same computation as expression text, which input
dtypes it accepts and how the output dtype follows from them. Shapes follow torch
broadcasting (:func:`rules.broadcast`) and dtypes torch promotion (:func:`rules.promote`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from verification.ops import rules
from verification.ops.spec import OpSpec, Params, TensorMeta

Accepts = Callable[[TensorMeta], bool]
DtypeRule = Callable[[torch.dtype], torch.dtype]
ParamsFor = Callable[[Sequence[TensorMeta]], st.SearchStrategy[dict[str, Any]]]


def _floats_only(dtype: torch.dtype) -> torch.dtype | None:
    return dtype if dtype in rules.FLOATS else None


def _fixed(**choices: Sequence[Any]) -> ParamsFor:
    strategy = st.fixed_dictionaries({k: st.sampled_from(list(v)) for k, v in choices.items()})
    return lambda metas: strategy


def _none(metas: Sequence[TensorMeta]) -> st.SearchStrategy[dict[str, Any]]:
    return st.just({})


def _clamp_bounds(metas: Sequence[TensorMeta]) -> st.SearchStrategy[dict[str, Any]]:
    bounds = st.sampled_from([-2.0, -0.5, 0.0, 0.5, 1.0, 3.0])
    return st.tuples(bounds, bounds).map(lambda b: {"lo": min(b), "hi": max(b)})


def _fill_value(metas: Sequence[TensorMeta]) -> st.SearchStrategy[dict[str, Any]]:
    values = {torch.bool: [True, False], torch.int64: [0, 7, -3]}.get(
        metas[0].dtype, [0.0, -1.5, 2.0]
    )
    return st.fixed_dictionaries({"value": st.sampled_from(values)})


def unary(
    name: str,
    run: Callable[..., torch.Tensor],
    expr: str,
    accepts: Accepts,
    result: DtypeRule = rules.same_dtype,
    params: ParamsFor = _none,
) -> OpSpec:
    def infer(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
        (m,) = metas
        return TensorMeta(m.shape, result(m.dtype)) if accepts(m) else None

    return OpSpec(name, 1, infer, expr, run=run, params=params)


def broadcasting(
    name: str,
    run: Callable[..., torch.Tensor],
    expr: str,
    accepts: Sequence[Accepts],
    result: Callable[[torch.dtype], torch.dtype | None] = rules.same_dtype,
    params: ParamsFor = _none,
    same_dtype: bool = False,
) -> OpSpec:
    """An op whose output has the broadcast shape and a dtype derived from promotion."""

    def infer(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
        if not all(ok(m) for ok, m in zip(accepts, metas)):
            return None
        if same_dtype and len({m.dtype for m in metas}) > 1:
            return None
        shape = rules.broadcast(*(m.shape for m in metas))
        dtype = result(rules.promote(*metas))
        if shape is None or dtype is None or not rules.fits(shape):
            return None
        return TensorMeta(shape, dtype)

    return OpSpec(name, len(accepts), infer, expr, run=run, params=params)


def _masked_fill_infer(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    x, mask = metas
    if not rules.is_bool(mask) or not rules.broadcasts_to(mask.shape, x.shape):
        return None
    return x


fl, ar, an = rules.is_float, rules.is_arith, rules.any_meta

OPS: list[OpSpec] = [
    unary("neg", lambda a: torch.neg(a), "torch.neg({0})", ar),
    unary("abs", lambda a: torch.abs(a), "torch.abs({0})", ar),
    unary("square", lambda a: torch.square(a), "torch.square({0})", ar),
    unary("relu", lambda a: torch.relu(a), "torch.relu({0})", ar),
    unary("exp", lambda a: torch.exp(a), "torch.exp({0})", fl),
    unary("tanh", lambda a: torch.tanh(a), "torch.tanh({0})", fl),
    unary("sigmoid", lambda a: torch.sigmoid(a), "torch.sigmoid({0})", fl),
    unary("sin", lambda a: torch.sin(a), "torch.sin({0})", fl),
    unary("cos", lambda a: torch.cos(a), "torch.cos({0})", fl),
    unary("erf", lambda a: torch.erf(a), "torch.erf({0})", fl),
    unary("floor", lambda a: torch.floor(a), "torch.floor({0})", fl),
    unary("round", lambda a: torch.round(a), "torch.round({0})", fl),
    unary("sign", lambda a: torch.sign(a), "torch.sign({0})", fl),
    unary("silu", lambda a: F.silu(a), "torch.nn.functional.silu({0})", fl),
    unary("softplus", lambda a: F.softplus(a), "torch.nn.functional.softplus({0})", fl),
    unary(
        "leaky_relu", lambda a: F.leaky_relu(a, 0.1), "torch.nn.functional.leaky_relu({0}, 0.1)", fl
    ),
    unary("log_abs1", lambda a: torch.log(torch.abs(a) + 1), "torch.log(torch.abs({0}) + 1)", fl),
    unary("sqrt_abs", lambda a: torch.sqrt(torch.abs(a)), "torch.sqrt(torch.abs({0}))", fl),
    unary(
        "nan_to_num",
        lambda a: torch.nan_to_num(a, nan=0.0, posinf=1.0, neginf=-1.0),
        "torch.nan_to_num({0}, nan=0.0, posinf=1.0, neginf=-1.0)",
        fl,
    ),
    unary(
        "gelu",
        lambda a, *, approximate: F.gelu(a, approximate=approximate),
        "torch.nn.functional.gelu({0}, approximate={approximate})",
        fl,
        params=_fixed(approximate=["none", "tanh"]),
    ),
    unary(
        "clamp",
        lambda a, *, lo, hi: torch.clamp(a, min=lo, max=hi),
        "torch.clamp({0}, min={lo}, max={hi})",
        fl,
        params=_clamp_bounds,
    ),
    unary(
        "logical_not", lambda a: torch.logical_not(a), "torch.logical_not({0})", an, rules.to_bool
    ),
    unary("isnan", lambda a: torch.isnan(a), "torch.isnan({0})", an, rules.to_bool),
    broadcasting(
        "add",
        lambda a, b, *, alpha: torch.add(a, b, alpha=alpha),
        "torch.add({0}, {1}, alpha={alpha})",
        (ar, ar),
        params=rules.alpha_param,
    ),
    broadcasting(
        "sub",
        lambda a, b, *, alpha: torch.sub(a, b, alpha=alpha),
        "torch.sub({0}, {1}, alpha={alpha})",
        (ar, ar),
        params=rules.alpha_param,
    ),
    broadcasting("mul", lambda a, b: torch.mul(a, b), "torch.mul({0}, {1})", (ar, ar)),
    broadcasting(
        "div", lambda a, b: torch.div(a, b), "torch.div({0}, {1})", (ar, ar), rules.float_result
    ),
    broadcasting("maximum", lambda a, b: torch.maximum(a, b), "torch.maximum({0}, {1})", (ar, ar)),
    broadcasting("minimum", lambda a, b: torch.minimum(a, b), "torch.minimum({0}, {1})", (ar, ar)),
    broadcasting(
        "atan2",
        lambda a, b: torch.atan2(a, b),
        "torch.atan2({0}, {1})",
        (ar, ar),
        rules.float_result,
    ),
    broadcasting(
        "pow_abs",
        lambda a, b: torch.pow(torch.abs(a), b),
        "torch.pow(torch.abs({0}), {1})",
        (ar, ar),
        _floats_only,
    ),
    broadcasting(
        "remainder",
        lambda a, b: torch.remainder(a, b),
        "torch.remainder({0}, {1})",
        (ar, ar),
        _floats_only,
    ),
    broadcasting("eq", lambda a, b: torch.eq(a, b), "torch.eq({0}, {1})", (an, an), rules.to_bool),
    broadcasting("lt", lambda a, b: torch.lt(a, b), "torch.lt({0}, {1})", (an, an), rules.to_bool),
    broadcasting("ge", lambda a, b: torch.ge(a, b), "torch.ge({0}, {1})", (an, an), rules.to_bool),
    broadcasting(
        "logical_and",
        lambda a, b: torch.logical_and(a, b),
        "torch.logical_and({0}, {1})",
        (an, an),
        rules.to_bool,
    ),
    broadcasting(
        "bitwise_xor",
        lambda a, b: torch.bitwise_xor(a, b),
        "torch.bitwise_xor({0}, {1})",
        (lambda m: not rules.is_float(m),) * 2,
    ),
    broadcasting(
        "where",
        lambda c, a, b: torch.where(c, a, b),
        "torch.where({0}, {1}, {2})",
        (rules.is_bool, an, an),
    ),
    broadcasting(
        "where_positive",
        lambda a, b: torch.where(a > 0, a, b),
        "torch.where({0} > 0, {0}, {1})",
        (ar, an),
    ),
    broadcasting(
        "lerp",
        lambda a, b, *, weight: torch.lerp(a, b, weight),
        "torch.lerp({0}, {1}, {weight})",
        (fl, fl),
        params=_fixed(weight=[0.0, 0.25, 0.5, 1.0]),
        same_dtype=True,
    ),
    broadcasting(
        "addcmul",
        lambda a, b, c, *, value: torch.addcmul(a, b, c, value=value),
        "torch.addcmul({0}, {1}, {2}, value={value})",
        (fl, fl, fl),
        params=_fixed(value=[1.0, 0.5, -2.0]),
        same_dtype=True,
    ),
    OpSpec(
        "masked_fill",
        2,
        _masked_fill_infer,
        "torch.masked_fill({0}, {1}, {value})",
        run=lambda x, mask, *, value: torch.masked_fill(x, mask, value),
        params=_fill_value,
    ),
]
