"""Out-buffer forms of ops (vLLM's break contract): the break writes into tensors its caller
allocated and returns None, so no target has to refresh a returned tensor.

:func:`out_buffer_forms` derives, from an op whose result is a fresh tensor (a catalog break
op, or a capturable op run as a break), one break op per entry of :data:`FORMS`: positional
buffer, keyword arguments, tensors inside a container, nested decorated calls, a view of a
larger buffer as the output (contiguous, or strided), and two outputs per break. The program allocates the buffers
(inside the capture with :data:`ALLOC`, or as static buffers before it) and later steps read
them. Every derived op is standalone ``source`` text, so reproducers print it unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from verification.ops.breaks import HEADER
from verification.ops.spec import OpSpec, Params, TensorMeta


def _alloc_infer(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    return TensorMeta(tuple(p["shape"]), p["dtype"]) if "shape" in p else metas[0]


# A buffer allocated inside the capture: it lives in the graph pool, freed and reused like
# any intermediate. Its argument only lends its device; the generator gives shape and dtype.
ALLOC = OpSpec(
    "alloc_buffer",
    1,
    _alloc_infer,
    "torch.empty({shape}, dtype={dtype}, device={0}.device)",
    run=lambda like, *, shape, dtype: torch.empty(shape, dtype=dtype, device=like.device),
    params=lambda metas: st.just({"shape": metas[0].shape, "dtype": metas[0].dtype}),
)


@dataclass(frozen=True)
class Form:
    """How an out-buffer break takes its buffers: ``buffers`` of them, the op's own breaks
    kept decorated inside it (``nested``), or the output a view of a larger buffer (``view``).
    ``nested_write``: the break calls a decorated function that writes the buffer and returns
    nothing, the nesting a contract without device returns allows. ``strided``: that view
    steps over every other element of the larger buffer (a non-contiguous output)."""

    name: str
    buffers: int = 1
    keywords: bool = False
    container: bool = False
    nested: bool = False
    view: bool = False
    nested_write: bool = False
    strided: bool = False


FORMS: tuple[Form, ...] = (
    Form("plain"),
    Form("kwargs", keywords=True),
    Form("container", container=True),
    Form("nested", nested=True),
    Form("view", view=True),
    Form("strided", view=True, strided=True),
    Form("pair", buffers=2),
    Form("nested_write", nested_write=True),
)


def _signature(*parts: str) -> str:
    return ", ".join(p for p in parts if p)


def _compute(spec: OpSpec, form: Form, entry: str, names: list[str], params: list[str]) -> str:
    """Source defining ``<entry>_compute``, the op's result as a fresh tensor."""
    if spec.kind == "break":
        inner = spec.source.replace(HEADER, "", 1).strip()
        if not form.nested:
            # The op's own breaks run as plain calls inside this break.
            inner = (
                "_decorator = eager_break_during_capture\n"
                "eager_break_during_capture = lambda fn: fn  # inner calls run inline\n"
                f"{inner}\n\n\neager_break_during_capture = _decorator"
            )
        return f"{inner}\n\n\n{entry}_compute = {spec.entry}\n"
    body = spec.expr.format(*names, **{p: p for p in params})
    decorator = "@eager_break_during_capture\n" if form.nested else ""
    signature = _signature(*names, "*" if params else "", *params)
    return f"{decorator}def {entry}_compute({signature}):\n    return {body}\n"


def _source(spec: OpSpec, form: Form, entry: str, params: list[str]) -> str:
    names = [f"a{i}" for i in range(spec.arity)]
    outs = ["out", "out2"][: form.buffers]
    keyword_params = ["*", *params] if params else []
    passed = [f"{p}={p}" for p in params]
    if form.keywords:
        signature = _signature("*", *names, *outs, *params)
        call = _signature(*(f"{n}={n}" for n in [*names, *outs]), *passed)
        bind = f"args = ({', '.join(names)},)"
    elif form.container:
        signature = _signature("tensors", *keyword_params)
        call = _signature(f'{{"inputs": [{", ".join(names)}], "out": out}}', *passed)
        bind = 'args, out = tuple(tensors["inputs"]), tensors["out"]'
    else:
        signature = _signature(*names, *outs, *keyword_params)
        call = _signature(*names, *outs, *passed)
        bind = f"args = ({', '.join(names)},)"
    params_dict = "{" + ", ".join(f'"{p}": {p}' for p in params) + "}"
    writer = [
        f"@eager_break_during_capture\ndef {entry}_write({signature}):",
        f"    {bind}",
        f"    result = {entry}_compute(*args, **{params_dict})",
        "    out.copy_(result)",
    ]
    if form.nested_write:
        writer = [
            f"@eager_break_during_capture\ndef {entry}_fill(out, args, params):",
            f"    out.copy_({entry}_compute(*args, **params))",
            "",
            "",
            *writer[:2],
            f"    {entry}_fill(out, args, {params_dict})",
        ]
    if form.buffers == 2:
        # A second, different output: a target that swaps or drops a buffer shows.
        writer.append("    out2.copy_(result.flip(list(range(result.dim()))))")
    buffers = ["big"] if form.view else outs
    entry_fn = [f"def {entry}({_signature(*names, *buffers, *keyword_params)}):"]
    if form.view:
        entry_fn.append("    out = big[..., 1]" if form.strided else "    out = big[1]")
    entry_fn.append(f"    {entry}_write({call})")
    entry_fn.append(
        "    return torch.stack([out, out2])" if form.buffers == 2 else "    return out"
    )
    parts = [_compute(spec, form, entry, names, params), "\n".join(writer), "\n".join(entry_fn)]
    return HEADER + "\n\n\n".join(part.strip() for part in parts) + "\n"


def _derived_infer(spec: OpSpec, form: Form):
    def infer(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
        base = spec.infer(metas[: spec.arity], p)
        if base is None or len(metas) == spec.arity:
            return base
        if tuple(metas[spec.arity :]) != _buffers(spec, form, metas[: spec.arity], p):
            return None
        if form.buffers == 2:
            return TensorMeta((2, *base.shape), base.dtype)
        return base

    return infer


def _buffers(
    spec: OpSpec, form: Form, metas: Sequence[TensorMeta], p: Params
) -> tuple[TensorMeta, ...]:
    base = spec.infer(metas, p)
    assert base is not None
    if form.strided:
        return (TensorMeta((*base.shape, 2), base.dtype),)
    if form.view:
        return (TensorMeta((2, *base.shape), base.dtype),)
    return (base,) * form.buffers


def _param_names(spec: OpSpec) -> tuple[str, ...]:
    """The keyword params an op draws, read from its expr template (``{name}`` fields)."""
    import string

    names = [f for _, f, _, _ in string.Formatter().parse(spec.expr) if f and not f.isdigit()]
    return tuple(dict.fromkeys(names))


def nests_a_returning_break(spec: OpSpec) -> bool:
    """Whether a derived op keeps a decorated call inside it that returns the op's fresh
    result (the ``nested`` form): a break returning a device tensor after all."""
    return spec.name.endswith(".out_nested")


def nests_a_writing_break(spec: OpSpec) -> bool:
    """Whether a derived op nests a decorated call that writes and returns nothing (the
    ``nested_write`` form): drawn only where breaks return no device tensor, so that the
    programs of every other contract stay as they were."""
    return spec.name.endswith(".out_nested_write")


def has_out_buffer_forms(spec: OpSpec) -> bool:
    """Ops whose result is a fresh tensor: under ``out-buffer`` they run as breaks only in
    out-buffer form."""
    return spec.outputs > 0 and spec.aliasing == "none" and spec.out_buffers == 0


@functools.cache
def out_buffer_forms(spec: OpSpec) -> tuple[OpSpec, ...]:
    """One out-buffer break op per :data:`FORMS` entry, named ``<op>.out_<form>``."""
    params = list(_param_names(spec))
    derived = []
    for form in FORMS:
        entry = f"{spec.name}_out_{form.name}"
        derived.append(
            OpSpec(
                f"{spec.name}.out_{form.name}",
                spec.arity + form.buffers,
                _derived_infer(spec, form),
                f"{entry}({', '.join(f'{{{i}}}' for i in range(spec.arity + form.buffers))}"
                + "".join(f", {p}={{{p}}}" for p in params)
                + ")",
                source=_source(spec, form, entry, params),
                entry=entry,
                params=spec.params,
                kind="break",
                aliasing="none" if form.buffers == 2 else ("view" if form.view else "out"),
                mutates=tuple(range(spec.arity, spec.arity + form.buffers)),
                outputs=1,
                deterministic=spec.deterministic,
                rng=spec.rng,
                rtol=spec.rtol,
                atol=spec.atol,
                out_buffers=form.buffers,
                buffer_metas=functools.partial(_buffers, spec, form),
            )
        )
    return tuple(derived)


def with_out_buffer_forms(specs: Sequence[OpSpec]) -> tuple[OpSpec, ...]:
    """``specs``, then :data:`ALLOC`, then the out-buffer forms of every op that has them."""
    forms = [f for spec in specs if has_out_buffer_forms(spec) for f in out_buffer_forms(spec)]
    return (*specs, ALLOC, *forms)
