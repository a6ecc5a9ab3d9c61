"""What an op is, as data: the one record the generator, executors and reporter share.

An :class:`OpSpec` declares how many tensor inputs an op takes, which inputs it accepts
(``infer`` returns ``None`` when it does not apply), the output it produces, the
non-tensor parameters it draws, how it aliases its inputs, how exactly replay must match
eager, and the Python text a reproducer prints for it. Adding an op means adding one
``OpSpec`` to a catalog list; nothing else.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from hypothesis import strategies as st


@dataclass(frozen=True)
class TensorMeta:
    """Shape and dtype of a value in a program's environment."""

    shape: tuple[int, ...]
    dtype: torch.dtype


Params = Mapping[str, Any]
# The decorator of the target under test (its ``eager_break_during_capture``), or the
# identity for the eager reference.
Decorate = Callable[[Callable[..., Any]], Callable[..., Any]]

Aliasing = Literal["none", "view", "inplace", "out"]


def _no_params(metas: Sequence[TensorMeta]) -> st.SearchStrategy[dict[str, Any]]:
    return st.just({})


@dataclass(frozen=True)
class OpSpec:
    """One op of the catalog.

    Capturable ops: ``run(*tensors, **params)`` computes the op and returns one tensor;
    ``expr`` is the same computation as a Python expression template (``{0}``, ``{1}``
    for the tensors, ``{name}`` for params, formatted with ``repr`` of param values) that
    a reproducer prints.

    Break ops (``kind == "break"``): ``source`` is standalone Python text (it may use
    ``torch``, ``dataclasses`` and the decorator name ``eager_break_during_capture``)
    defining the function named ``entry``; ``callable_for(decorate)`` executes that text
    with ``eager_break_during_capture`` bound to ``decorate``, so the fuzzer and the
    reproducer run the very same code. ``expr`` is the call, e.g. ``"scale_by_item({0})"``.

    ``infer(metas, params)`` predicts the output's :class:`TensorMeta` without running,
    or ``None`` when the inputs do not fit; it must agree with the op exactly. For ops
    with ``outputs == 0`` it returns any non-``None`` value when the op applies.
    ``mutates`` lists the tensor inputs the op writes in place (in-place and ``out=``).
    ``aliasing="view"`` means the output may share memory with a tensor input.
    ``overlapping`` marks outputs whose elements may share memory (``expand``): neither
    they nor views of them may be the destination of an in-place or ``out=`` op.

    Out-buffer break ops (:mod:`verification.ops.out_buffer`) take ``out_buffers`` trailing
    tensors the program allocates for them (captured or static); ``buffer_metas(metas,
    params)`` gives their metas from the other arguments' metas. ``infer`` of such an op
    also accepts the other arguments' metas alone.

    ``alias_varies``: a break whose result is its argument (or a view of it) on some calls and
    a new tensor on others; a target may refuse it at replay with an error naming ``entry``.

    ``untrusted``: code the harness does not vouch for (a user's op), judged on capture-time
    garbage: a GPU capture of a program holding it fills its pool with poison first, as the
    simulator hands every capture poisoned memory.
    """

    name: str
    arity: int
    infer: Callable[[Sequence[TensorMeta], Params], TensorMeta | None]
    expr: str
    run: Callable[..., torch.Tensor] | None = None
    source: str = ""
    entry: str = ""
    params: Callable[[Sequence[TensorMeta]], st.SearchStrategy[dict[str, Any]]] = _no_params
    kind: Literal["capturable", "break"] = "capturable"
    aliasing: Aliasing = "none"
    mutates: tuple[int, ...] = ()
    outputs: int = 1
    deterministic: bool = True
    rng: bool = False
    rtol: float = 0.0
    atol: float = 0.0
    overlapping: bool = False
    out_buffers: int = 0
    buffer_metas: Callable[[Sequence[TensorMeta], Params], tuple[TensorMeta, ...]] | None = None
    alias_varies: bool = False
    untrusted: bool = False

    def callable_for(self, decorate: Decorate) -> Callable[..., Any]:
        """The callable a step runs; break ops are built from ``source`` with ``decorate``."""
        if self.kind != "break":
            assert self.run is not None, f"capturable op {self.name} has no run"
            return self.run
        namespace: dict[str, Any] = {"eager_break_during_capture": decorate}
        exec(_compiled(self.source, f"<break op {self.name}>"), namespace)
        return namespace[self.entry]


@functools.lru_cache(maxsize=1024)
def _compiled(source: str, filename: str) -> types.CodeType:
    # Every checked program builds its break callables afresh; parsing is the costly half.
    return compile(source, filename, "exec")
