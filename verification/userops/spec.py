"""A user's break op, declared once next to its code: :class:`BreakOpSpec` and :class:`TensorArg`.

A spec names the callable, its tensor arguments (symbolic shapes over ``dims`` ranges,
dtypes, inclusive value bounds that may be dim expressions such as ``"n-1"``, distinct
values, a sentinel drawn with a probability), which arguments it overwrites, reads and
updates, or writes only in part, its non-tensor parameters as hypothesis strategies, what
it returns and a tolerance. :func:`load_spec` imports ``MODULE:SPEC`` and :func:`validate`
rejects a spec that cannot work, both with a one-line :class:`~verification.errors.UsageError`.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from hypothesis import strategies as st

from verification.errors import UsageError

Dim = int | str
# A number, or a dim expression: dim names, integers, + - * // and parentheses ("n-1").
Bound = int | float | str | None
# Called like the op (tensors and params by keyword), before the call; returns a bool tensor
# broadcastable to the argument, True where the call may write.
WriteMask = Callable[..., torch.Tensor]


@dataclass(frozen=True)
class TensorArg:
    """One tensor argument.

    ``shape`` entries are sizes, dim names or dim expressions (``"batch+1"`` for
    ``cu_seqlens``, ``"2*heads"``). ``low``/``high`` are inclusive bounds on its
    values: numbers, or dim expressions evaluated with the call's sizes (``high="n-1"``,
    ``high="blocks*block_size-1"``). ``unique=True`` (integer dtypes, both bounds) draws
    distinct values, as a slot or permutation index needs. ``sentinel`` is a value drawn in
    place of each element with probability ``sentinel_rate`` (default 0.25), outside the
    bounds if need be and repeated freely: ``sentinel=-1`` for padding slots.

    Unless ``contiguous=True``, the harness also passes it as a strided view of a larger
    buffer (a column slice, as q and k come out of a fused qkv buffer), contiguous at a
    storage offset, or transposed (two dims or more), and expects what it does on a
    contiguous copy. Declare ``contiguous=True`` only where every caller passes it so.
    """

    shape: tuple[Dim, ...]
    # One dtype, a choice of dtypes, or the name of an earlier argument whose dtype it shares.
    dtype: torch.dtype | tuple[torch.dtype, ...] | str = torch.float32
    low: Bound = None
    high: Bound = None
    unique: bool = False
    sentinel: int | float | None = None
    sentinel_rate: float | None = None
    contiguous: bool = False

    @property
    def dtypes(self) -> tuple[torch.dtype, ...]:
        """The dtypes it may have (empty when it shares another argument's)."""
        if isinstance(self.dtype, str):
            return ()
        return self.dtype if isinstance(self.dtype, tuple) else (self.dtype,)

    @property
    def bounded(self) -> bool:
        return self.low is not None or self.high is not None

    @property
    def fitted(self) -> bool:
        """Whether drawn raw values need a producer step to meet the declaration."""
        return self.bounded or self.unique or self.sentinel is not None

    @property
    def rate(self) -> float:
        return 0.25 if self.sentinel_rate is None else self.sentinel_rate


@dataclass(frozen=True)
class BreakOpSpec:
    """Everything the harness needs to fuzz ``fn`` as an eager break.

    ``fn`` is called with every tensor argument by keyword (``args`` order is free) plus
    the drawn ``params``. It must return ``None``, the name of a written argument it
    returns (``returns="out"``), or a fresh tensor described by a :class:`TensorArg`
    (``returns=TensorArg(...)``), and write nothing but:

    - ``writes``: outputs it overwrites on every call (the harness fills them with a
      sentinel first and checks each changed); they carry no value bounds;
    - ``inout``: read-modify-write buffers, read and updated in place (a KV cache, a
      counter); they may carry value bounds, e.g. ``inout=("counts",)`` with
      ``"counts": TensorArg(("n",), torch.int32, low=0, high=100)``;
    - ``partial``: for arguments of ``writes`` or ``inout`` that a call may write only in
      part or not at all, a mask function (or ``None``: anywhere). A paged KV-cache write
      skipping padding slots (-1) declares
      ``partial={"kv": lambda slots, kv, **_: slot_rows(slots, kv)}``, the mask True on the
      rows of valid slots; writing elsewhere is a violation.

    Index arguments bound by other sizes use dim expressions:
    ``"slots": TensorArg(("tokens",), torch.int64, low=0, high="blocks*block_size-1",
    unique=True, sentinel=-1)`` is a slot per token, distinct, -1 for padding. Replay must
    match eager within ``rtol``/``atol``. If ``fn`` carries a library's break decorator, the
    harness unwraps it and applies the target's.
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
    inout: tuple[str, ...] = ()
    partial: Mapping[str, WriteMask | None] = field(default_factory=dict)

    @property
    def op_name(self) -> str:
        return self.name or getattr(self.raw_fn, "__name__", "user_op")

    @property
    def raw_fn(self) -> Callable[..., Any]:
        return inspect.unwrap(self.fn)

    @property
    def written(self) -> tuple[str, ...]:
        """Every argument a call may change: ``writes``, then ``inout``."""
        return (*self.writes, *self.inout)

    def call(self, *tensors: torch.Tensor, **params: Any) -> Any:
        """Calls ``fn`` with the tensors (in ``args`` order) by keyword: a program step's form."""
        return self.raw_fn(**dict(zip(self.args, tensors)), **params)


Binding = Mapping[str, int]

_EXPRESSION_NODES = (
    ast.Expression,
    ast.BinOp,
    ast.UnaryOp,
    ast.Name,
    ast.Load,
    ast.Constant,
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.FloorDiv,
    ast.USub,
)


@functools.lru_cache(maxsize=256)
def _parsed(expression: str) -> tuple[ast.expr, frozenset[str]] | None:
    """The parsed dim expression and the names it uses, or None if it is not one. Parsed
    only, never compiled: :func:`_evaluate` walks the tree, so a spec runs no code here."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, _EXPRESSION_NODES):
            return None
        if isinstance(node, ast.Constant) and type(node.value) is not int:
            return None
    names = frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name))
    return tree.body, names


_OPERATORS: dict[type, Callable[[int, int], int]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
}


def _evaluate(node: ast.expr, binding: Binding) -> int:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return binding[node.id]
    if isinstance(node, ast.UnaryOp):
        return -_evaluate(node.operand, binding)
    assert isinstance(node, ast.BinOp)
    left, right = _evaluate(node.left, binding), _evaluate(node.right, binding)
    return _OPERATORS[type(node.op)](left, right)


def dim_value(expression: str, binding: Binding) -> int:
    """A dim expression's value under the call's sizes: ``"batch+1"`` with batch=3 is 4."""
    parsed = _parsed(expression)
    assert parsed is not None, f"unvalidated dim expression {expression!r}"
    return _evaluate(parsed[0], binding)


def dim_names(entry: Dim) -> frozenset[str]:
    """The dim names a shape entry or bound uses (none for a number)."""
    parsed = _parsed(entry) if isinstance(entry, str) else None
    return parsed[1] if parsed is not None else frozenset()


def resolve_shape(arg: TensorArg, binding: Binding) -> tuple[int, ...]:
    return tuple(dim_value(d, binding) if isinstance(d, str) else d for d in arg.shape)


def dtypes_of(spec: BreakOpSpec, name: str) -> tuple[torch.dtype, ...]:
    """The dtypes argument ``name`` (or ``"<return>"``) may have, following dtype names."""
    arg = spec.returns if name == "<return>" else spec.args[name]
    assert isinstance(arg, TensorArg)
    if isinstance(arg.dtype, str):
        return spec.args[arg.dtype].dtypes if arg.dtype in spec.args else ()
    return arg.dtypes


def resolve_bound(bound: Bound, binding: Binding) -> int | float | None:
    """A bound's value under the call's sizes (a dim expression is evaluated)."""
    return dim_value(bound, binding) if isinstance(bound, str) else bound


def _type_problem(spec: BreakOpSpec) -> str | None:
    """What has the wrong Python type: checked first, so later checks may rely on types."""
    if not callable(spec.fn):
        return f"fn is a {type(spec.fn).__name__}, not a callable"
    if not isinstance(spec.args, Mapping):
        return f"args is a {type(spec.args).__name__}; give a dict of name -> TensorArg"
    if not spec.args:
        return "args is empty: declare at least one tensor argument"
    if not isinstance(spec.dims, Mapping):
        return f"dims is a {type(spec.dims).__name__}; give a dict, e.g. {{'n': (1, 16)}}"
    for name, size in spec.dims.items():
        if not isinstance(name, str) or not name.isidentifier():
            return f"dim name {name!r} is not an identifier"
        if not (
            isinstance(size, tuple | list) and len(size) == 2 and all(type(v) is int for v in size)
        ):
            return f"dim {name!r} has range {size!r}; give (low, high), e.g. {{{name!r}: (1, {size if type(size) is int else 16})}}"
    for label in ("writes", "inout"):
        names = getattr(spec, label)
        if isinstance(names, str) or not isinstance(names, tuple | list):
            return f"{label}={names!r} is a {type(names).__name__}; give a tuple of argument names, e.g. {label}=({names!r},)"
    if not isinstance(spec.params, Mapping):
        return (
            f"params is a {type(spec.params).__name__}; give a dict of name -> hypothesis strategy"
        )
    for name, strategy in spec.params.items():
        if not isinstance(strategy, st.SearchStrategy):
            return (
                f"params[{name!r}] is a {type(strategy).__name__}, not a hypothesis strategy "
                f"(e.g. st.just({strategy!r}) or st.sampled_from([...]))"
            )
    if not isinstance(spec.partial, Mapping):
        return f"partial is a {type(spec.partial).__name__}; give a dict of argument name -> mask function or None"
    for name, mask in spec.partial.items():
        if mask is not None and not callable(mask):
            return f"partial[{name!r}] is a {type(mask).__name__}, not a mask function or None"
    tensors = dict(spec.args)
    if spec.returns is not None and not isinstance(spec.returns, TensorArg | str):
        return f"returns is a {type(spec.returns).__name__}; give None, an argument name or a TensorArg"
    if isinstance(spec.returns, TensorArg):
        tensors["<return>"] = spec.returns
    for name, arg in tensors.items():
        problem = _arg_type_problem(name, arg)
        if problem is not None:
            return problem
    for label in ("rtol", "atol"):
        value = getattr(spec, label)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"{label}={value!r} is not a number"
    return None


def _arg_type_problem(name: str, arg: Any) -> str | None:
    if not isinstance(arg, TensorArg):
        return f"args[{name!r}] is a {type(arg).__name__}, not a TensorArg"
    if isinstance(arg.shape, str):
        return f"argument {name!r} has shape {arg.shape!r}, a string; give a tuple, e.g. ({arg.shape!r},)"
    if not isinstance(arg.shape, tuple | list):
        return f"argument {name!r} has shape {arg.shape!r}; give a tuple of sizes and dim names"
    for d in arg.shape:
        if isinstance(d, bool) or not isinstance(d, int | str):
            return f"argument {name!r} has shape entry {d!r}; use sizes (int) and dim names (str)"
        if isinstance(d, str) and _parsed(d) is None:
            return (
                f"argument {name!r} has shape entry {d!r}, which is not a dim expression "
                f"(dim names and integers with + - * //, e.g. 'batch+1' or '2*heads')"
            )
    dtypes = arg.dtype if isinstance(arg.dtype, tuple) else (arg.dtype,)
    if not isinstance(arg.dtype, str) and not all(isinstance(t, torch.dtype) for t in dtypes):
        return f"argument {name!r} has dtype {arg.dtype!r}; give a torch.dtype, a tuple of them or an argument name"
    for label in ("low", "high"):
        bound = getattr(arg, label)
        if isinstance(bound, bool) or not (bound is None or isinstance(bound, int | float | str)):
            return f"argument {name!r} has {label}={bound!r}; give a number or a dim expression"
        if isinstance(bound, str) and _parsed(bound) is None:
            return (
                f"argument {name!r} has {label}={bound!r}, which is not a dim expression "
                f"(dim names and integers with + - * //, e.g. 'n-1' or 'blocks*block_size-1')"
            )
    for label in ("unique", "contiguous"):
        if not isinstance(getattr(arg, label), bool):
            return f"argument {name!r} has {label}={getattr(arg, label)!r}; give True or False"
    if arg.sentinel is not None and (
        isinstance(arg.sentinel, bool) or not isinstance(arg.sentinel, int | float)
    ):
        return f"argument {name!r} has sentinel={arg.sentinel!r}; give a number"
    if arg.sentinel_rate is not None:
        if arg.sentinel is None:
            return f"argument {name!r} has sentinel_rate but no sentinel value"
        rate = arg.sentinel_rate
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate <= 1:
            return f"argument {name!r} has sentinel_rate={rate!r}; need 0 < rate <= 1"
    return None


def _problem(spec: BreakOpSpec) -> str | None:
    """The first reason ``spec`` cannot be fuzzed, as the text of a one-line error."""
    problem = _type_problem(spec)
    if problem is not None:
        return problem
    for name, (low, high) in spec.dims.items():
        if not 1 <= low <= high:
            return f"shapes cannot be satisfied: dim {name!r} has range ({low}, {high}); need 1 <= low <= high"
    clash = set(spec.args) & set(spec.params)
    if clash:
        return f"{sorted(clash)[0]!r} is both a tensor argument and a param"
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
    return _shape_problem(spec) or _value_problem(spec) or _write_problem(spec)


def _shape_problem(spec: BreakOpSpec) -> str | None:
    tensors = dict(spec.args)
    if isinstance(spec.returns, TensorArg):
        tensors["<return>"] = spec.returns
    arg_dims = {n for a in spec.args.values() for d in a.shape for n in dim_names(d)}
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
            unknown = sorted(dim_names(d) - set(spec.dims))
            if unknown:
                return f"shapes cannot be satisfied: {name!r} uses dim {unknown[0]!r}, which dims does not declare"
            if isinstance(d, int) and d < 1:
                return (
                    f"shapes cannot be satisfied: {name!r} has size {d}; sizes must be at least 1"
                )
            missing = sorted(dim_names(d) - arg_dims) if name == "<return>" else []
            if missing:
                return f"the return shape uses dim {missing[0]!r}, which no argument's shape determines"
        for bound in (arg.low, arg.high):
            if isinstance(bound, str):
                unknown = sorted(_parsed(bound)[1] - set(spec.dims))  # type: ignore[index]
                if unknown:
                    return f"value bound {bound!r} of {name!r} names dim {unknown[0]!r}, which dims does not declare"
        if arg.bounded and any(t == torch.bool or t.is_complex for t in dtypes_of(spec, name)):
            return f"argument {name!r}: value bounds need a real, non-bool dtype"
    problem = _recoverable_problem(spec)
    if problem is not None:
        return problem
    if isinstance(spec.returns, TensorArg) and len(dtypes_of(spec, "<return>")) != 1:
        return "returns must declare exactly one dtype (or name an argument's)"
    return None


def _recoverable_problem(spec: BreakOpSpec) -> str | None:
    """A dim the arguments' sizes do not pin down. The harness reads each call's dims back
    from its arguments' shapes: a dim must be a plain entry somewhere, or the one dim of an
    expression that takes a different value for each size in its range."""
    entries = [d for a in spec.args.values() for d in a.shape if isinstance(d, str)]
    plain = {d for d in entries if d in spec.dims}
    for dim in sorted({n for d in entries for n in dim_names(d)} - plain):
        solo = [d for d in entries if dim_names(d) == {dim}]
        low, high = spec.dims[dim]
        if not any(
            len({dim_value(d, {dim: v}) for v in range(low, high + 1)}) == high - low + 1
            for d in solo
        ):
            return (
                f"dim {dim!r} appears only in shape expressions that do not determine it "
                f"({', '.join(repr(d) for d in entries if dim in dim_names(d))}); give it a "
                f"plain shape entry in some argument, or an expression of it alone such as "
                f"'{dim}+1'"
            )
    return None


def _value_problem(spec: BreakOpSpec) -> str | None:
    """Bounds, distinct values and sentinels that some sizes within the dims cannot meet."""
    for name, arg in spec.args.items():
        dtypes = dtypes_of(spec, name)
        if arg.unique and (arg.low is None or arg.high is None):
            return f"argument {name!r} is unique: give both low and high"
        if arg.unique and any(t.is_floating_point or t == torch.bool for t in dtypes):
            return f"argument {name!r} is unique: unique values need an integer dtype"
        if arg.sentinel is not None:
            for dtype in dtypes:
                if not _holds(dtype, arg.sentinel):
                    return (
                        f"argument {name!r}: sentinel {arg.sentinel!r} does not fit dtype {dtype}"
                    )
    # Bounds must hold for every size the dims can take: check every corner of the ranges.
    corners = itertools.product(*([(lo, hi) for lo, hi in spec.dims.values()]))
    for corner in corners:
        binding = dict(zip(spec.dims, corner))
        where = ", ".join(f"{k}={v}" for k, v in binding.items()) or "no dims"
        tensors = {
            **spec.args,
            **({"<return>": spec.returns} if isinstance(spec.returns, TensorArg) else {}),
        }
        for name, arg in tensors.items():
            for d, size in zip(arg.shape, resolve_shape(arg, binding)):
                if size < 1:
                    return f"shapes cannot be satisfied: {name!r} has size {d!r} = {size} ({where})"
        for name, arg in spec.args.items():
            low, high = resolve_bound(arg.low, binding), resolve_bound(arg.high, binding)
            if low is not None and high is not None and low > high:
                return (
                    f"shapes cannot be satisfied: values of {name!r} need {low} <= {high} ({where})"
                )
            for bound in (low, high):
                if bound is not None and not all(_holds(t, bound) for t in dtypes_of(spec, name)):
                    return f"argument {name!r}: bound {bound} does not fit its dtype ({where})"
            if arg.unique:
                count = math.prod(resolve_shape(arg, binding))
                if count > high - low + 1:  # type: ignore[operator]
                    return (
                        f"argument {name!r} is unique but has {count} elements and only "
                        f"{high - low + 1} values in [{low}, {high}] ({where})"  # type: ignore[operator]
                    )
    return None


def _holds(dtype: torch.dtype, value: int | float) -> bool:
    if dtype == torch.bool:
        return value in (0, 1)
    if dtype.is_floating_point:
        return math.isnan(value) or abs(value) <= torch.finfo(dtype).max or math.isinf(value)
    if dtype.is_complex:
        return True
    if value != int(value):
        return False
    info = torch.iinfo(dtype)
    return info.min <= value <= info.max


def _write_problem(spec: BreakOpSpec) -> str | None:
    for label in ("writes", "inout"):
        for name in getattr(spec, label):
            if name not in spec.args:
                return f"{label} names {name!r}, which is not one of args ({', '.join(spec.args)})"
    both = sorted(set(spec.writes) & set(spec.inout))
    if both:
        return (
            f"{both[0]!r} is in both writes and inout: writes= is for outputs the op "
            f"overwrites, inout= for buffers it reads and updates"
        )
    for name in spec.writes:
        arg = spec.args[name]
        if arg.fitted:
            return (
                f"written argument {name!r} cannot have value bounds, unique or a sentinel: "
                f"the op overwrites it; declare it in inout= if the op reads it and updates it"
            )
    for name in spec.partial:
        if name not in spec.written:
            return f"partial names {name!r}, which is in neither writes nor inout"
    if isinstance(spec.returns, str) and spec.returns not in spec.written:
        return f"returns={spec.returns!r} must name an argument in writes or inout"
    if spec.rtol < 0 or spec.atol < 0:
        return "rtol and atol must be non-negative"
    return None


def validate(spec: BreakOpSpec) -> None:
    """Raises :class:`UsageError` (one line) when ``spec`` cannot be fuzzed."""
    try:
        problem = _problem(spec)
    except Exception as error:  # a spec malformed in a way no check above foresaw
        problem = f"cannot be read ({_first_line(error)})"
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
            f"op spec {ref!r} is a {type(spec).__name__}, not a verification.BreakOpSpec"
        )
    validate(spec)
    return LoadedSpec(spec, module_name, attr, getattr(module, "__file__", None))
