"""Reductions, scans and normalisations: sum/mean/amax/argmax/prod/var/norm/logsumexp and
friends over a drawn ``dim`` (with ``keepdim``), cumulative scans, full reductions to 0-d,
softmax/log_softmax, layer_norm and an RMS norm written with plain torch ops.

Output shapes come from :func:`rules.reduced`; output dtypes from each row's dtype rule
(integer and bool sums accumulate in int64, arg-reductions give int64, any/all give bool).
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


def _widen_ints(dtype: torch.dtype) -> torch.dtype:
    return dtype if dtype in rules.FLOATS else torch.int64


def _index(dtype: torch.dtype) -> torch.dtype:
    return torch.int64


def _dim_keepdim(metas: Sequence[TensorMeta]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"dim": rules.dims(len(metas[0].shape)), "keepdim": st.booleans()})


def _with(extra: dict[str, list[Any]]) -> Callable[[Sequence[TensorMeta]], st.SearchStrategy]:
    def params(metas: Sequence[TensorMeta]) -> st.SearchStrategy[dict[str, Any]]:
        more = st.fixed_dictionaries({k: st.sampled_from(v) for k, v in extra.items()})
        return st.tuples(_dim_keepdim(metas), more).map(lambda d: {**d[0], **d[1]})

    return params


def _var_params(metas: Sequence[TensorMeta]) -> st.SearchStrategy[dict[str, Any]]:
    # Bessel's correction over a single element warns and divides by zero.
    shape = metas[0].shape

    def corrections(p: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
        largest = 1 if rules.size_at(shape, p["dim"]) > 1 else 0
        return st.integers(0, largest).map(lambda c: {**p, "correction": c})

    return _dim_keepdim(metas).flatmap(corrections)


def reduction(
    name: str,
    run: Callable[..., torch.Tensor],
    expr: str,
    accepts: Accepts,
    result: Callable[[torch.dtype], torch.dtype],
    extra: dict[str, list[Any]] | None = None,
    params: Callable[[Sequence[TensorMeta]], st.SearchStrategy] | None = None,
) -> OpSpec:
    """A reduction over one drawn ``dim``, keeping it as size 1 when ``keepdim``."""

    def infer(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
        (m,) = metas
        shape = rules.reduced(m.shape, p.get("dim", -1), p.get("keepdim", False))
        return TensorMeta(shape, result(m.dtype)) if accepts(m) and shape is not None else None

    drawn = params or (_with(extra) if extra else _dim_keepdim)
    return OpSpec(name, 1, infer, expr, run=run, params=drawn)


def torch_reduction(
    name: str, accepts: Accepts, result: Callable[[torch.dtype], torch.dtype]
) -> OpSpec:
    """``torch.<name>(a, dim=dim, keepdim=keepdim)`` as a :func:`reduction`."""
    # Looked up at each call, as a written-out ``torch.<name>`` would be: the simulator may
    # patch torch's functions after this catalog is built.
    return reduction(
        name,
        lambda a, *, dim, keepdim: getattr(torch, name)(a, dim=dim, keepdim=keepdim),
        f"torch.{name}({{0}}, dim={{dim}}, keepdim={{keepdim}})",
        accepts,
        result,
    )


def along_dim(
    name: str,
    run: Callable[..., torch.Tensor],
    expr: str,
    accepts: Accepts,
    result: Callable[[torch.dtype], torch.dtype] = rules.same_dtype,
) -> OpSpec:
    """A shape-preserving op along one drawn ``dim`` (scans, softmax)."""

    def infer(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
        (m,) = metas
        ok = accepts(m) and rules.wrap_dim(p.get("dim", -1), len(m.shape)) is not None
        return TensorMeta(m.shape, result(m.dtype)) if ok else None

    return OpSpec(name, 1, infer, expr, run=run, params=rules.dim_param)


def full(
    name: str,
    run: Callable[..., torch.Tensor],
    expr: str,
    accepts: Accepts,
    result: Callable[[torch.dtype], torch.dtype],
) -> OpSpec:
    """A reduction of every element to a 0-d tensor."""

    def infer(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
        return TensorMeta((), result(metas[0].dtype)) if accepts(metas[0]) else None

    return OpSpec(name, 1, infer, expr, run=run)


def _layer_norm(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    (x,) = metas
    ok = rules.is_float(x) and 1 <= p.get("k", 1) <= len(x.shape)
    return x if ok else None


def _last_dim_weights(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    """x plus per-feature weights (and bias) shaped like x's last dim, all one float dtype."""
    x, *weights = metas
    ok = rules.is_float(x) and len(x.shape) >= 1
    ok = ok and all(w.shape == x.shape[-1:] and w.dtype == x.dtype for w in weights)
    return x if ok else None


def _norm_depth(metas: Sequence[TensorMeta]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"k": st.integers(1, max(len(metas[0].shape), 1))})


fl, ar = rules.is_float, rules.is_arith


OPS: list[OpSpec] = [
    torch_reduction("sum", rules.any_meta, _widen_ints),
    torch_reduction("mean", fl, rules.same_dtype),
    torch_reduction("amax", ar, rules.same_dtype),
    torch_reduction("amin", ar, rules.same_dtype),
    reduction(
        "max_values",
        lambda a, *, dim, keepdim: torch.max(a, dim=dim, keepdim=keepdim).values,
        "torch.max({0}, dim={dim}, keepdim={keepdim}).values",
        ar,
        rules.same_dtype,
    ),
    torch_reduction("argmax", ar, _index),
    torch_reduction("argmin", ar, _index),
    torch_reduction("prod", ar, _widen_ints),
    reduction(
        "var",
        lambda a, *, dim, keepdim, correction: torch.var(
            a, dim=dim, keepdim=keepdim, correction=correction
        ),
        "torch.var({0}, dim={dim}, keepdim={keepdim}, correction={correction})",
        fl,
        rules.same_dtype,
        params=_var_params,
    ),
    reduction(
        "norm",
        lambda a, *, dim, keepdim, ord: torch.linalg.vector_norm(
            a, ord=ord, dim=dim, keepdim=keepdim
        ),
        "torch.linalg.vector_norm({0}, ord={ord}, dim={dim}, keepdim={keepdim})",
        fl,
        rules.same_dtype,
        extra={"ord": [1, 2, 3]},
    ),
    torch_reduction("logsumexp", fl, rules.same_dtype),
    torch_reduction("any", rules.any_meta, rules.to_bool),
    torch_reduction("all", rules.any_meta, rules.to_bool),
    along_dim(
        "cumsum",
        lambda a, *, dim: torch.cumsum(a, dim=dim),
        "torch.cumsum({0}, dim={dim})",
        rules.any_meta,
        _widen_ints,
    ),
    along_dim(
        "cumprod", lambda a, *, dim: torch.cumprod(a, dim=dim), "torch.cumprod({0}, dim={dim})", fl
    ),
    along_dim(
        "softmax", lambda a, *, dim: torch.softmax(a, dim=dim), "torch.softmax({0}, dim={dim})", fl
    ),
    along_dim(
        "log_softmax",
        lambda a, *, dim: torch.log_softmax(a, dim=dim),
        "torch.log_softmax({0}, dim={dim})",
        fl,
    ),
    full("sum_all", lambda a: torch.sum(a), "torch.sum({0})", rules.any_meta, _widen_ints),
    full("mean_all", lambda a: torch.mean(a), "torch.mean({0})", fl, rules.same_dtype),
    full("amax_all", lambda a: torch.amax(a), "torch.amax({0})", ar, rules.same_dtype),
    OpSpec(
        "layer_norm",
        1,
        _layer_norm,
        "torch.nn.functional.layer_norm({0}, {0}.shape[-{k}:])",
        run=lambda x, *, k: F.layer_norm(x, x.shape[-k:]),
        params=_norm_depth,
    ),
    OpSpec(
        "layer_norm_affine",
        3,
        _last_dim_weights,
        "torch.nn.functional.layer_norm({0}, {0}.shape[-1:], {1}, {2})",
        run=lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b),
    ),
    OpSpec(
        "rms_norm",
        2,
        _last_dim_weights,
        "{0} * torch.rsqrt(torch.mean({0} * {0}, dim=-1, keepdim=True) + 1e-6) * {1}",
        run=lambda x, w: x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + 1e-6) * w,
    ),
]
