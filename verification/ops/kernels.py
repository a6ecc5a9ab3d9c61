"""Which dtypes each catalog op has a kernel for: data derived by running the op once.

The catalog's shape and dtype rules (``infer``) are written, and tested, for the dtypes that
programs make (:data:`NATIVE_DTYPES`). A user's op brings others (float8, int8, int32,
float64, ...), for which torch has kernels in some ops only. :func:`has_kernel` answers for
an op and the dtypes of its tensor arguments by running the op once on small CPU tensors
(and on the GPU too when a real one is in use), and keeps the answer for the process: a
program never draws an op on a dtype it has no kernel for.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from hypothesis import HealthCheck, Phase, find, settings
from hypothesis.errors import NoSuchExample, Unsatisfiable

from verification.ops.casts import CAST_DTYPES
from verification.ops.spec import OpSpec, Params, TensorMeta, _no_params
from verification.sim import is_active

# The dtypes ``infer`` is exact for: what programs make as inputs and what casts give.
NATIVE_DTYPES: frozenset[torch.dtype] = frozenset(CAST_DTYPES)
# What torch says when a dtype has no kernel (as opposed to a bad value or shape).
_NO_KERNEL = ("not implemented for", "not supported", "promotion for float8", "unsupported dtype")

_answers: dict[tuple, bool] = {}


def has_kernel(op: OpSpec, metas: Sequence[TensorMeta], params: Params | None = None) -> bool:
    """Whether ``op`` runs on tensor arguments like ``metas`` (and gives the dtype ``infer``
    predicts). Native dtypes need no probe. Without ``params`` the answer is per dtype tuple
    (a filter, probed once); with them it is exact for these shapes and params, since some
    kernels dispatch on the dtype only for some shapes (``flip`` of a contiguous row)."""
    dtypes = tuple(m.dtype for m in metas)
    if op.kind != "capturable" or all(d in NATIVE_DTYPES for d in dtypes):
        return True
    key: tuple = (id(op), dtypes)
    if params is not None:
        key += (tuple(metas), tuple(sorted(params.items())))
    try:
        answer = _answers.get(key)
    except TypeError:  # a param that cannot be hashed: probe without keeping the answer
        return _probe(op, metas, params)
    if answer is None:
        answer = _answers[key] = _probe(op, metas, params)
    return answer


def _probe(op: OpSpec, metas: Sequence[TensorMeta], params: Params | None) -> bool:
    if params is not None:
        return op.infer(metas, params) is None or _runs(op, metas, params)
    # Sizes of 1 let some kernels return early without dispatching on the dtype: probe with
    # every size at least 2 where the op accepts that.
    grown = [TensorMeta(tuple(max(s, 2) for s in m.shape) or (2,), m.dtype) for m in metas]
    for shapes in (grown, metas):
        chosen = _some_params(op, shapes)
        if chosen is not None and op.infer(shapes, chosen) is not None:
            return _runs(op, shapes, chosen)
    return True  # infer refuses these dtypes itself: nothing to add


def _runs(op: OpSpec, metas: Sequence[TensorMeta], params: Params) -> bool:
    expected = op.infer(metas, params)
    devices = ["cpu"]
    if not is_active() and torch.cuda.is_available():
        devices.append("cuda")  # GPU kernels cover fewer dtypes than CPU ones
    for device in devices:
        tensors = [_value(m, device) for m in metas]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a probe's lossy cast is not the user's
                out = op.run(*tensors, **params)  # type: ignore[misc]
        except Exception as error:
            text = str(error).lower()
            if isinstance(error, NotImplementedError) or any(s in text for s in _NO_KERNEL):
                return False
            continue  # a value this probe made up (a zero divisor...): not about the kernel
        if isinstance(expected, TensorMeta) and (
            not isinstance(out, torch.Tensor) or out.dtype != expected.dtype
        ):
            return False
    return True


def _value(meta: TensorMeta, device: str) -> torch.Tensor:
    # Zeros are a valid index into every non-empty dimension.
    if meta.dtype.is_floating_point or meta.dtype.is_complex:
        return torch.ones(meta.shape).to(dtype=meta.dtype, device=device)
    return torch.zeros(meta.shape, dtype=meta.dtype, device=device)


def _some_params(op: OpSpec, metas: Sequence[TensorMeta]) -> Params | None:
    """The simplest params ``infer`` accepts for ``metas`` (deterministic), or None."""
    if op.params is _no_params:
        return {}
    try:
        return find(
            op.params(metas),
            lambda p: op.infer(metas, p) is not None,
            settings=settings(
                max_examples=20,
                database=None,
                derandomize=True,
                phases=[Phase.generate, Phase.shrink],
                suppress_health_check=list(HealthCheck),
            ),
        )
    except (NoSuchExample, Unsatisfiable):
        return None
