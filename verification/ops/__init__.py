"""The op catalog: every capturable op and break op a random program may use, as data.

``CAPTURABLE`` and ``BREAK_OPS`` map names to :class:`OpSpec`; ``ALL_OPS`` merges them;
``get_op`` looks one up; ``INPUT_DTYPES`` lists the dtypes programs create static inputs
with (float32 first: use it most). Metas are assumed non-empty; no op produces an empty
tensor. ``render`` turns a step into the Python text a reproducer prints.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from verification.ops import (
    breaks,
    casts,
    elementwise,
    indexing,
    linalg,
    mutating,
    random,
    reductions,
    shaping,
)
from verification.ops.spec import OpSpec, TensorMeta

__all__ = [
    "ALL_OPS",
    "BREAK_OPS",
    "CAPTURABLE",
    "INPUT_DTYPES",
    "OpSpec",
    "TensorMeta",
    "get_op",
    "render",
]

INPUT_DTYPES: tuple[torch.dtype, ...] = (
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.bool,
)


def _by_name(specs: Sequence[OpSpec]) -> dict[str, OpSpec]:
    table: dict[str, OpSpec] = {}
    for spec in specs:
        assert spec.name not in table, f"op {spec.name!r} is declared twice"
        table[spec.name] = spec
    return table


CAPTURABLE: dict[str, OpSpec] = _by_name(
    [
        *elementwise.OPS,
        *linalg.OPS,
        *reductions.OPS,
        *indexing.OPS,
        *shaping.OPS,
        *casts.OPS,
        *random.OPS,
        *mutating.OPS,
    ]
)
BREAK_OPS: dict[str, OpSpec] = _by_name(breaks.OPS)
ALL_OPS: dict[str, OpSpec] = _by_name([*CAPTURABLE.values(), *BREAK_OPS.values()])


def get_op(name: str) -> OpSpec:
    """The op called ``name``; a KeyError naming close matches otherwise."""
    try:
        return ALL_OPS[name]
    except KeyError:
        close = difflib.get_close_matches(name, ALL_OPS, n=3)
        hint = f"did you mean {', '.join(close)}?" if close else "see verification.ops.ALL_OPS"
        raise KeyError(f"unknown op {name!r}; {hint}") from None


def render(spec: OpSpec, tensor_names: Sequence[str], params: Mapping[str, Any]) -> str:
    """The step as Python text: ``spec.expr`` with tensor names and ``repr`` of params."""
    return spec.expr.format(*tensor_names, **{k: repr(v) for k, v in params.items()})
