"""A user's break op, declared once next to its code: :class:`BreakOpSpec` and :class:`TensorArg`.

A spec names the callable, its tensor arguments (symbolic shapes over ``dims`` ranges,
dtypes, inclusive value bounds that may name a dim), which arguments it writes, its
non-tensor parameters as hypothesis strategies, what it returns and a tolerance.
:func:`load_spec` imports ``MODULE:SPEC`` and :func:`validate` rejects a spec that cannot
work, both with a one-line :class:`~verification.errors.UsageError`.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from hypothesis import strategies as st

from verification.errors import UsageError

Dim = int | str
Bound = int | float | str | None


@dataclass(frozen=True)
class TensorArg:
    """One tensor argument: ``shape`` entries are sizes or dim names; ``low``/``high`` are
    inclusive bounds on its values (a dim name means that dim's size in the same call)."""

    shape: tuple[Dim, ...]
    # One dtype, a choice of dtypes, or the name of an earlier argument whose dtype it shares.
    dtype: torch.dtype | tuple[torch.dtype, ...] | str = torch.float32
    low: Bound = None
    high: Bound = None

    @property
    def dtypes(self) -> tuple[torch.dtype, ...]:
        """The dtypes it may have (empty when it shares another argument's)."""
        if isinstance(self.dtype, str):
            return ()
        return self.dtype if isinstance(self.dtype, tuple) else (self.dtype,)

    @property
    def bounded(self) -> bool:
        return self.low is not None or self.high is not None


@dataclass(frozen=True)
class BreakOpSpec:
    """Everything the harness needs to fuzz ``fn`` as an eager break.

    ``fn`` is called with every tensor argument by keyword (``args`` order is free) plus
    the drawn ``params``. It must write the arguments named in ``writes`` in place and
    return ``None``, the name of a written argument it returns (``returns="out"``), or a
    fresh tensor described by a :class:`TensorArg` (``returns=TensorArg(...)``); it must
    not write anything else. Replay must match eager within ``rtol``/``atol``. If ``fn``
    carries a library's break decorator, the harness unwraps it and applies the target's.
    """

    fn: Callable[..., Any]
    args: Mapping[str, TensorArg]
    dims: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    writes: tuple[str, ...] = ()
    params: Mapping[str, st.SearchStrategy[Any]] = field(default_factory=dict)
    returns: TensorArg | str | None = None
    rtol: float = 0.0
    atol: float = 0.0
    name: str | None = None

    @property
    def op_name(self) -> str:
        return self.name or getattr(self.raw_fn, "__name__", "user_op")

    @property
    def raw_fn(self) -> Callable[..., Any]:
        return inspect.unwrap(self.fn)

    def call(self, *tensors: torch.Tensor, **params: Any) -> Any:
        """Calls ``fn`` with the tensors (in ``args`` order) by keyword: a program step's form."""
        return self.raw_fn(**dict(zip(self.args, tensors)), **params)


Binding = Mapping[str, int]


def resolve_shape(arg: TensorArg, binding: Binding) -> tuple[int, ...]:
    return tuple(binding[d] if isinstance(d, str) else d for d in arg.shape)


def dtypes_of(spec: BreakOpSpec, name: str) -> tuple[torch.dtype, ...]:
    """The dtypes argument ``name`` (or ``"<return>"``) may have, following dtype names."""
    arg = spec.returns if name == "<return>" else spec.args[name]
    assert isinstance(arg, TensorArg)
    if isinstance(arg.dtype, str):
        return spec.args[arg.dtype].dtypes if arg.dtype in spec.args else ()
    return arg.dtypes


def resolve_bound(bound: Bound, binding: Binding) -> int | float | None:
    return binding[bound] if isinstance(bound, str) else bound


def _problem(spec: BreakOpSpec) -> str | None:
    """The first reason ``spec`` cannot be fuzzed, as the text of a one-line error."""
    if not callable(spec.fn):
        return f"fn is a {type(spec.fn).__name__}, not a callable"
    if not spec.args:
        return "args is empty: declare at least one tensor argument"
    for name, (low, high) in spec.dims.items():
        if not 1 <= low <= high:
            return f"shapes cannot be satisfied: dim {name!r} has range ({low}, {high}); need 1 <= low <= high"
    try:
        signature = inspect.signature(spec.raw_fn)
    except (TypeError, ValueError):
        signature = None
    if signature is not None and not any(
        p.kind is p.VAR_KEYWORD for p in signature.parameters.values()
    ):
        takes = {n for n, p in signature.parameters.items() if p.kind is not p.VAR_POSITIONAL}
        for name in [*spec.args, *spec.params]:
            if name not in takes:
                return f"{spec.op_name}() takes no argument {name!r} (it takes {', '.join(sorted(takes)) or 'none'})"
    return _shape_problem(spec) or _write_problem(spec)


def _shape_problem(spec: BreakOpSpec) -> str | None:
    tensors = dict(spec.args)
    if isinstance(spec.returns, TensorArg):
        tensors["<return>"] = spec.returns
    arg_dims = {d for a in spec.args.values() for d in a.shape if isinstance(d, str)}
    for name, arg in tensors.items():
        if isinstance(arg.dtype, str):
            earlier = list(spec.args)[: list(tensors).index(name)]
            if arg.dtype not in earlier or isinstance(spec.args[arg.dtype].dtype, str):
                return (
                    f"{name!r} has dtype {arg.dtype!r}: name an earlier argument with its own dtype"
                )
        elif not arg.dtypes:
            return f"argument {name!r} declares no dtype"
        for d in arg.shape:
            if isinstance(d, str) and d not in spec.dims:
                return f"shapes cannot be satisfied: {name!r} uses dim {d!r}, which dims does not declare"
            if isinstance(d, int) and d < 1:
                return (
                    f"shapes cannot be satisfied: {name!r} has size {d}; sizes must be at least 1"
                )
            if name == "<return>" and isinstance(d, str) and d not in arg_dims:
                return f"the return shape uses dim {d!r}, which no argument's shape determines"
        for bound in (arg.low, arg.high):
            if isinstance(bound, str) and bound not in spec.dims:
                return f"value bound of {name!r} names dim {bound!r}, which dims does not declare"
        if arg.bounded and any(t == torch.bool or t.is_complex for t in dtypes_of(spec, name)):
            return f"argument {name!r}: value bounds need a real, non-bool dtype"
    if isinstance(spec.returns, TensorArg) and len(dtypes_of(spec, "<return>")) != 1:
        return "returns must declare exactly one dtype (or name an argument's)"
    # Bounds must hold for every size the dims can take: check every corner of the ranges.
    corners = itertools.product(*([(lo, hi) for lo, hi in spec.dims.values()]))
    for corner in corners:
        binding = dict(zip(spec.dims, corner))
        for name, arg in spec.args.items():
            low, high = resolve_bound(arg.low, binding), resolve_bound(arg.high, binding)
            if low is not None and high is not None and low > high:
                where = ", ".join(f"{k}={v}" for k, v in binding.items())
                return (
                    f"shapes cannot be satisfied: values of {name!r} need {low} <= {high} ({where})"
                )
    return None


def _write_problem(spec: BreakOpSpec) -> str | None:
    for name in spec.writes:
        if name not in spec.args:
            return f"writes names {name!r}, which is not one of args ({', '.join(spec.args)})"
        if spec.args[name].bounded:
            return f"written argument {name!r} cannot have value bounds"
    if isinstance(spec.returns, str) and spec.returns not in spec.writes:
        return f"returns={spec.returns!r} must name an argument in writes"
    if spec.rtol < 0 or spec.atol < 0:
        return "rtol and atol must be non-negative"
    return None


def validate(spec: BreakOpSpec) -> None:
    """Raises :class:`UsageError` (one line) when ``spec`` cannot be fuzzed."""
    problem = _problem(spec)
    if problem is not None:
        raise UsageError(f"op spec {spec.op_name}: {problem}")


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec and where it came from: ``ref`` is ``MODULE:ATTR``."""

    spec: BreakOpSpec
    module: str
    attr: str
    path: str | None

    @property
    def ref(self) -> str:
        return f"{self.module}:{self.attr}"


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def load_spec(ref: str) -> LoadedSpec:
    """Imports ``MODULE:SPEC``, checks it is a :class:`BreakOpSpec` and validates it."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr.isidentifier():
        raise UsageError(f"op spec {ref!r}: expected MODULE:SPEC, e.g. myops:ATTENTION_SPEC")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise UsageError(
            f"op spec {ref!r}: module {module_name!r} does not import ({_first_line(error)})"
        ) from None
    if not hasattr(module, attr):
        raise UsageError(f"op spec {ref!r}: module {module_name!r} has no attribute {attr!r}")
    spec = getattr(module, attr)
    if not isinstance(spec, BreakOpSpec):
        raise UsageError(
            f"op spec {ref!r} is a {type(spec).__name__}, not a verification.userops.spec.BreakOpSpec"
        )
    validate(spec)
    return LoadedSpec(spec, module_name, attr, getattr(module, "__file__", None))
