"""Random-number capturable ops: rand_like, randn_like, randint_like, dropout (training) and
the in-place fills bernoulli_, uniform_ and normal_.

All are ``rng=True``: under graph replay they draw fresh numbers, so the oracle may only
compare shape, dtype and value range. They accept floating tensors only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from verification.ops import rules
from verification.ops.spec import OpSpec, Params, TensorMeta


def _float_like(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    return metas[0] if rules.is_float(metas[0]) else None


def _probability(metas: Sequence[TensorMeta]) -> st.SearchStrategy[dict[str, Any]]:
    # Not 0.0: dropout(p=0) returns its input itself, an alias.
    return st.sampled_from([0.25, 0.5, 0.9]).map(lambda p: {"p": p})


def _fill(name: str, run: Any, expr: str, **extra: Any) -> OpSpec:
    return OpSpec(
        name, 1, _float_like, expr, run=run, rng=True, aliasing="inplace", mutates=(0,), **extra
    )


OPS: list[OpSpec] = [
    OpSpec(
        "rand_like",
        1,
        _float_like,
        "torch.rand_like({0})",
        run=lambda a: torch.rand_like(a),
        rng=True,
    ),
    OpSpec(
        "randn_like",
        1,
        _float_like,
        "torch.randn_like({0})",
        run=lambda a: torch.randn_like(a),
        rng=True,
    ),
    OpSpec(
        "randint_like",
        1,
        _float_like,
        "torch.randint_like({0}, 0, 10)",
        run=lambda a: torch.randint_like(a, 0, 10),
        rng=True,
    ),
    OpSpec(
        "dropout",
        1,
        _float_like,
        "torch.nn.functional.dropout({0}, p={p}, training=True)",
        run=lambda a, *, p: F.dropout(a, p=p, training=True),
        params=_probability,
        rng=True,
    ),
    _fill(
        "bernoulli_", lambda a, *, p: a.bernoulli_(p), "{0}.bernoulli_({p})", params=_probability
    ),
    _fill("uniform_", lambda a: a.uniform_(-1.0, 1.0), "{0}.uniform_(-1.0, 1.0)"),
    _fill("normal_", lambda a: a.normal_(), "{0}.normal_()"),
]
