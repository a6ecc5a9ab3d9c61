"""Shape ops: views (view, reshape, transpose, permute, expand, narrow, select, split/chunk/
unbind pieces, ...) and copying layout ops (cat, stack, flip, roll, repeat, tril, clone).

``aliasing="view"`` means the output may share memory with the input (always does for a
contiguous input; ``reshape``/``flatten``/``contiguous`` copy only when strides force it).
``expand`` sets ``overlapping``: its output must never be written in place. Params such
as target shapes are drawn from the input's shape, so every draw is valid.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis import strategies as st

from verification.ops import rules
from verification.ops.spec import OpSpec, Params, TensorMeta

Strategy = st.SearchStrategy[dict[str, Any]]


def _splits(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    return [
        (*shape[:d], f, n // f, *shape[d + 1 :])
        for d, n in enumerate(shape)
        for f in range(1, n + 1)
        if n % f == 0
    ]


def _view_params(metas: Sequence[TensorMeta]) -> Strategy:
    shapes = _splits(metas[0].shape) or [metas[0].shape]
    return st.sampled_from(shapes).map(lambda s: {"shape": s})


def _view(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    # Splitting one dim in two is a view whatever the strides; merging is not.
    (m,) = metas
    shape = p.get("shape", m.shape)
    ok = shape == m.shape or shape in _splits(m.shape)
    return TensorMeta(shape, m.dtype) if ok and m.shape and rules.fits(shape) else None


def _reshape_params(metas: Sequence[TensorMeta]) -> Strategy:
    shape = metas[0].shape
    n = math.prod(shape)
    candidates = {(n,), (1, n), tuple(reversed(shape)), *_splits(shape)}
    candidates |= {(shape[0], n // shape[0])} if shape else set()
    return st.sampled_from(sorted(c for c in candidates if rules.fits(c))).map(
        lambda s: {"shape": s}
    )


def _reshape(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    (m,) = metas
    shape = tuple(p.get("shape", m.shape))
    ok = math.prod(shape) == math.prod(m.shape) and rules.fits(shape)
    return TensorMeta(shape, m.dtype) if ok else None


def _flatten_params(metas: Sequence[TensorMeta]) -> Strategy:
    rank = max(len(metas[0].shape), 1)
    pairs = [(s, e) for s in range(rank) for e in range(s, rank)]
    return st.sampled_from(pairs).map(lambda se: {"start": se[0], "end": se[1]})


def _flatten(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    (m,) = metas
    start, end = p.get("start", 0), p.get("end", -1)
    s, e = rules.wrap_dim(start, len(m.shape)), rules.wrap_dim(end, len(m.shape))
    if s is None or e is None or s > e:
        return None
    if not m.shape:
        return TensorMeta((1,), m.dtype)
    return TensorMeta((*m.shape[:s], math.prod(m.shape[s : e + 1]), *m.shape[e + 1 :]), m.dtype)


def _two_dims(metas: Sequence[TensorMeta]) -> Strategy:
    d = rules.dims(len(metas[0].shape))
    return st.fixed_dictionaries({"d0": d, "d1": d})


def _transpose(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    (m,) = metas
    a, b = (rules.wrap_dim(p.get(k, -1), len(m.shape)) for k in ("d0", "d1"))
    if not m.shape or a is None or b is None:
        return None
    shape = list(m.shape)
    shape[a], shape[b] = shape[b], shape[a]
    return TensorMeta(tuple(shape), m.dtype)


def _movedim(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    (m,) = metas
    a, b = (rules.wrap_dim(p.get(k, -1), len(m.shape)) for k in ("d0", "d1"))
    if not m.shape or a is None or b is None:
        return None
    shape = list(m.shape)
    shape.insert(b, shape.pop(a))
    return TensorMeta(tuple(shape), m.dtype)


def _permute_params(metas: Sequence[TensorMeta]) -> Strategy:
    return st.permutations(range(len(metas[0].shape))).map(lambda p: {"perm": tuple(p)})


def _permute(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    (m,) = metas
    perm = tuple(p.get("perm", range(len(m.shape))))
    if not m.shape or sorted(perm) != list(range(len(m.shape))):
        return None
    return TensorMeta(tuple(m.shape[d] for d in perm), m.dtype)


def _expand_params(metas: Sequence[TensorMeta]) -> Strategy:
    shape = metas[0].shape
    sizes = [st.sampled_from([1, 2, 3]) if n == 1 else st.just(n) for n in shape]
    lead = st.sampled_from([(), (2,)])
    return st.tuples(lead, st.tuples(*sizes)).map(lambda t: {"shape": t[0] + t[1]})


def _expand(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    (m,) = metas
    shape = tuple(p.get("shape", m.shape))
    ok = len(shape) >= len(m.shape) and rules.fits(shape)
    ok = ok and all(n in (1, t) for n, t in zip(reversed(m.shape), reversed(shape)))
    return TensorMeta(shape, m.dtype) if ok else None


def _unsqueeze_params(metas: Sequence[TensorMeta]) -> Strategy:
    ndim = len(metas[0].shape)
    return st.fixed_dictionaries({"dim": st.integers(-ndim - 1, ndim)})


def _unsqueeze(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    (m,) = metas
    d = rules.wrap_dim(p.get("dim", 0), len(m.shape) + 1)
    shape = (*m.shape[:d], 1, *m.shape[d:]) if d is not None else None
    return TensorMeta(shape, m.dtype) if shape is not None and rules.fits(shape) else None


def _squeeze(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    (m,) = metas
    d = rules.wrap_dim(p.get("dim", -1), len(m.shape))
    if d is None:
        return None
    keep = not m.shape or m.shape[d] != 1
    return TensorMeta(m.shape if keep else m.shape[:d] + m.shape[d + 1 :], m.dtype)


def _narrow_params(metas: Sequence[TensorMeta]) -> Strategy:
    shape = metas[0].shape or (1,)

    def pick(dim: int) -> Strategy:
        n = shape[dim]
        return st.integers(0, n - 1).flatmap(
            lambda s: st.integers(1, n - s).map(lambda ln: {"dim": dim, "start": s, "length": ln})
        )

    return st.integers(0, len(shape) - 1).flatmap(pick)


def _narrow(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    (m,) = metas
    d = rules.ranked_dim(metas, {"dim": p.get("dim", 0)})
    start, length = p.get("start", 0), p.get("length", 1)
    if d is None or not (0 <= start and 1 <= length and start + length <= m.shape[d]):
        return None
    return TensorMeta((*m.shape[:d], length, *m.shape[d + 1 :]), m.dtype)


def _slice_params(metas: Sequence[TensorMeta]) -> Strategy:
    n = (metas[0].shape or (1,))[-1]
    return st.fixed_dictionaries({"start": st.integers(0, n - 1), "step": st.integers(1, 3)})


def _slice_last(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    (m,) = metas
    start, step = p.get("start", 0), p.get("step", 1)
    if not m.shape or not (0 <= start < m.shape[-1]) or step < 1:
        return None
    return TensorMeta((*m.shape[:-1], -(-(m.shape[-1] - start) // step)), m.dtype)


def _select_params(metas: Sequence[TensorMeta]) -> Strategy:
    shape = metas[0].shape or (1,)
    return st.integers(0, len(shape) - 1).flatmap(
        lambda d: st.integers(0, shape[d] - 1).map(lambda i: {"dim": d, "index": i})
    )


def _select(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    (m,) = metas
    d = rules.ranked_dim(metas, {"dim": p.get("dim", 0)})
    if d is None or not 0 <= p.get("index", 0) < m.shape[d]:
        return None
    return TensorMeta(m.shape[:d] + m.shape[d + 1 :], m.dtype)


def _piece_lengths(n: int, size: int) -> list[int]:
    return [min(size, n - start) for start in range(0, n, size)]


def _chunk_size(n: int, chunks: int) -> int:
    return -(-n // chunks)


def _pieces_params(key: str, size_of: Callable[[int, int], int]) -> Callable[..., Strategy]:
    """Draws a dim, a split size (or chunk count) and the index of an existing piece."""

    def params(metas: Sequence[TensorMeta]) -> Strategy:
        shape = metas[0].shape or (1,)

        def for_dim(d: int) -> Strategy:
            n = shape[d]
            return st.integers(1, n).flatmap(
                lambda k: st.integers(0, len(_piece_lengths(n, size_of(n, k))) - 1).map(
                    lambda i: {"dim": d, key: k, "index": i}
                )
            )

        return st.integers(0, len(shape) - 1).flatmap(for_dim)

    return params


def _pieces(key: str, size_of: Callable[[int, int], int]) -> Callable[..., TensorMeta | None]:
    def infer(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
        (m,) = metas
        d = rules.ranked_dim(metas, {"dim": p.get("dim", 0)})
        k = p.get(key, 1)
        if d is None or not 1 <= k:
            return None
        lengths = _piece_lengths(m.shape[d], size_of(m.shape[d], k))
        i = p.get("index", 0)
        if not 0 <= i < len(lengths):
            return None
        return TensorMeta((*m.shape[:d], lengths[i], *m.shape[d + 1 :]), m.dtype)

    return infer


def _unbind(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    return _select(metas, p)


def _diagonal(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    (m,) = metas
    if len(m.shape) < 2:
        return None
    return TensorMeta((*m.shape[:-2], min(m.shape[-2:])), m.dtype)


def _matrix_transpose(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    (m,) = metas
    return (
        TensorMeta((*m.shape[:-2], m.shape[-1], m.shape[-2]), m.dtype)
        if len(m.shape) >= 2
        else None
    )


def _same(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    return metas[0]


def _cat(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    a, b = metas
    d = rules.ranked_dim(metas, p)
    if d is None or len(a.shape) != len(b.shape):
        return None
    if any(x != y for i, (x, y) in enumerate(zip(a.shape, b.shape)) if i != d):
        return None
    shape = (*a.shape[:d], a.shape[d] + b.shape[d], *a.shape[d + 1 :])
    return TensorMeta(shape, rules.promote(a, b)) if rules.fits(shape) else None


def _stack_params(metas: Sequence[TensorMeta]) -> Strategy:
    ndim = len(metas[0].shape)
    return st.fixed_dictionaries({"dim": st.integers(-ndim - 1, ndim)})


def _stack(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    a, b = metas
    d = rules.wrap_dim(p.get("dim", 0), len(a.shape) + 1)
    if d is None or a.shape != b.shape:
        return None
    shape = (*a.shape[:d], 2, *a.shape[d:])
    return TensorMeta(shape, rules.promote(a, b)) if rules.fits(shape) else None


def _flip_params(metas: Sequence[TensorMeta]) -> Strategy:
    rank = max(len(metas[0].shape), 1)
    return st.sets(st.integers(0, rank - 1), min_size=1).map(lambda s: {"dims": tuple(sorted(s))})


def _flip(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    (m,) = metas
    ok = all(rules.wrap_dim(d, len(m.shape)) is not None for d in p.get("dims", (0,)))
    return m if ok and m.shape else None


def _roll_params(metas: Sequence[TensorMeta]) -> Strategy:
    return st.fixed_dictionaries(
        {"shift": st.integers(-3, 3), "dim": rules.dims(len(metas[0].shape))}
    )


def _roll(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    return metas[0] if rules.ranked_dim(metas, p) is not None else None


def _repeat_params(metas: Sequence[TensorMeta]) -> Strategy:
    ndim = len(metas[0].shape)
    return st.tuples(*[st.sampled_from([1, 2])] * ndim, st.sampled_from([(), (2,)])).map(
        lambda t: {"reps": t[-1] + t[:-1]}
    )


def _repeat(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    (m,) = metas
    reps = tuple(p.get("reps", (1,) * len(m.shape)))
    if len(reps) < len(m.shape) or not reps:
        return None
    padded = (1,) * (len(reps) - len(m.shape)) + m.shape
    shape = tuple(r * n for r, n in zip(reps, padded))
    return TensorMeta(shape, m.dtype) if rules.fits(shape) else None


def _tril(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    return metas[0] if len(metas[0].shape) >= 2 else None


VIEWS: list[OpSpec] = [
    OpSpec(
        "view",
        1,
        _view,
        "{0}.view({shape})",
        run=lambda a, *, shape: a.view(shape),
        params=_view_params,
    ),
    OpSpec(
        "reshape",
        1,
        _reshape,
        "torch.reshape({0}, {shape})",
        run=lambda a, *, shape: torch.reshape(a, shape),
        params=_reshape_params,
    ),
    OpSpec(
        "flatten",
        1,
        _flatten,
        "torch.flatten({0}, {start}, {end})",
        run=lambda a, *, start, end: torch.flatten(a, start, end),
        params=_flatten_params,
    ),
    OpSpec(
        "transpose",
        1,
        _transpose,
        "torch.transpose({0}, {d0}, {d1})",
        run=lambda a, *, d0, d1: torch.transpose(a, d0, d1),
        params=_two_dims,
    ),
    OpSpec(
        "movedim",
        1,
        _movedim,
        "torch.movedim({0}, {d0}, {d1})",
        run=lambda a, *, d0, d1: torch.movedim(a, d0, d1),
        params=_two_dims,
    ),
    OpSpec(
        "permute",
        1,
        _permute,
        "{0}.permute({perm})",
        run=lambda a, *, perm: a.permute(perm),
        params=_permute_params,
    ),
    OpSpec(
        "expand",
        1,
        _expand,
        "{0}.expand({shape})",
        run=lambda a, *, shape: a.expand(shape),
        params=_expand_params,
        overlapping=True,
    ),
    OpSpec("contiguous", 1, _same, "{0}.contiguous()", run=lambda a: a.contiguous()),
    OpSpec(
        "unsqueeze",
        1,
        _unsqueeze,
        "torch.unsqueeze({0}, {dim})",
        run=lambda a, *, dim: torch.unsqueeze(a, dim),
        params=_unsqueeze_params,
    ),
    OpSpec(
        "squeeze",
        1,
        _squeeze,
        "torch.squeeze({0}, {dim})",
        run=lambda a, *, dim: torch.squeeze(a, dim),
        params=rules.dim_param,
    ),
    OpSpec(
        "narrow",
        1,
        _narrow,
        "torch.narrow({0}, {dim}, {start}, {length})",
        run=lambda a, *, dim, start, length: torch.narrow(a, dim, start, length),
        params=_narrow_params,
    ),
    OpSpec(
        "slice_last",
        1,
        _slice_last,
        "{0}[..., {start}::{step}]",
        run=lambda a, *, start, step: a[..., start::step],
        params=_slice_params,
    ),
    OpSpec(
        "select",
        1,
        _select,
        "torch.select({0}, {dim}, {index})",
        run=lambda a, *, dim, index: torch.select(a, dim, index),
        params=_select_params,
    ),
    OpSpec(
        "split_piece",
        1,
        _pieces("size", lambda n, size: size),
        "torch.split({0}, {size}, dim={dim})[{index}]",
        run=lambda a, *, size, dim, index: torch.split(a, size, dim=dim)[index],
        params=_pieces_params("size", lambda n, size: size),
    ),
    OpSpec(
        "chunk_piece",
        1,
        _pieces("chunks", _chunk_size),
        "torch.chunk({0}, {chunks}, dim={dim})[{index}]",
        run=lambda a, *, chunks, dim, index: torch.chunk(a, chunks, dim=dim)[index],
        params=_pieces_params("chunks", _chunk_size),
    ),
    OpSpec(
        "unbind_piece",
        1,
        _unbind,
        "torch.unbind({0}, {dim})[{index}]",
        run=lambda a, *, dim, index: torch.unbind(a, dim)[index],
        params=_select_params,
    ),
    OpSpec(
        "diagonal",
        1,
        _diagonal,
        "torch.diagonal({0}, 0, -2, -1)",
        run=lambda a: torch.diagonal(a, 0, -2, -1),
    ),
    OpSpec("matrix_transpose", 1, _matrix_transpose, "{0}.mT", run=lambda a: a.mT),
]

COPIES: list[OpSpec] = [
    OpSpec(
        "cat",
        2,
        _cat,
        "torch.cat([{0}, {1}], dim={dim})",
        run=lambda a, b, *, dim: torch.cat([a, b], dim=dim),
        params=lambda metas: rules.accepted(_cat, metas, rules.dim_choices(len(metas[0].shape))),
    ),
    OpSpec(
        "stack",
        2,
        _stack,
        "torch.stack([{0}, {1}], dim={dim})",
        run=lambda a, b, *, dim: torch.stack([a, b], dim=dim),
        params=_stack_params,
    ),
    OpSpec(
        "flip",
        1,
        _flip,
        "torch.flip({0}, {dims})",
        run=lambda a, *, dims: torch.flip(a, dims),
        params=_flip_params,
    ),
    OpSpec(
        "roll",
        1,
        _roll,
        "torch.roll({0}, {shift}, {dim})",
        run=lambda a, *, shift, dim: torch.roll(a, shift, dim),
        params=_roll_params,
    ),
    OpSpec(
        "repeat",
        1,
        _repeat,
        "{0}.repeat({reps})",
        run=lambda a, *, reps: a.repeat(reps),
        params=_repeat_params,
    ),
    OpSpec("tril", 1, _tril, "torch.tril({0})", run=lambda a: torch.tril(a)),
    OpSpec("clone", 1, _same, "torch.clone({0})", run=lambda a: torch.clone(a)),
]

OPS: list[OpSpec] = [
    *(dataclasses.replace(op, aliasing="view") for op in VIEWS),
    *COPIES,
]
