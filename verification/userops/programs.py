"""Programs that run a user's break op 1 to 3 times at random break positions.

:func:`user_ops` turns loaded specs into catalog :class:`OpSpec` records (the op called
directly, and nested inside another break) whose source imports the user's module, so a
reproducer runs the user's real code. :func:`op_programs` splices calls of them into the
generator's random programs: captured (or eager) producers make each argument satisfy its
declaration, captured catalog ops consume its outputs. :func:`break_positions` says where
each call landed: ``first``, ``last``, ``adjacent``, ``nested`` or ``middle``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from hypothesis import strategies as st

from verification.ops.kernels import has_kernel
from verification.ops.spec import OpSpec, Params, TensorMeta
from verification.programs import (
    Program,
    Step,
    default_ops,
    op_table,
    produces_value,
    programs,
    with_drops,
)
from verification.targets.contracts import Contract
from verification.userops.spec import (
    Binding,
    BreakOpSpec,
    LoadedSpec,
    TensorArg,
    dim_names,
    dim_value,
    resolve_bound,
    resolve_shape,
)

POSITIONS = ("first", "last", "adjacent", "nested", "middle")
# make_inputs draws signed integers from [-8, 8): 16 distinct values before any producer.
_RAW_INT_SPAN = 16


def _same(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    return metas[0]


# Producers: captured steps that turn a random static input into a value meeting the
# argument's declaration. Generic over shapes; the bounds arrive as params.
FIT_INT = OpSpec(
    "opfit_int",
    1,
    _same,
    "({0}.remainder({span}) + {low})",
    run=lambda x, *, span, low: x.remainder(span) + low,
)
FIT_FLOAT = OpSpec(
    "opfit_float",
    1,
    _same,
    "{0}.clamp({low}, {high})",
    run=lambda x, *, low, high: x.clamp(low, high),
)
# The same clamp in float32 and back, for float dtypes that have no clamp kernel (float8):
# float32 holds each of their values exactly.
FIT_FLOAT_WIDE = OpSpec(
    "opfit_float_wide",
    1,
    _same,
    "{0}.float().clamp({low}, {high}).to({0}.dtype)",
    run=lambda x, *, low, high: x.float().clamp(low, high).to(x.dtype),
)
FIT_COPY = OpSpec("opfit_copy", 1, _same, "{0}.clone()", run=lambda x: x.clone())
# Distinct values in [low, low + step * numel): a permutation (the order of the raw values)
# spread by ``step``, shifted within a step by the raw first value.
_UNIQUE = (
    "({0}.flatten().argsort(stable=True) * {step} + {0}.flatten()[0].remainder({step}) + {low})"
    ".reshape({0}.shape).to({0}.dtype)"
)
FIT_UNIQUE = OpSpec(
    "opfit_unique",
    1,
    _same,
    _UNIQUE,
    run=lambda x, *, step, low: (
        (x.flatten().argsort(stable=True) * step + x.flatten()[0].remainder(step) + low)
        .reshape(x.shape)
        .to(x.dtype)
    ),
)
# The sentinel where a raw coin input (uniform over 16 values) falls below ``below``.
_SENTINEL = "torch.where({1}.remainder(16) < {below}, {value}, {0})"
FIT_SENTINEL = OpSpec(
    "opfit_sentinel",
    2,
    _same,
    _SENTINEL,
    run=lambda x, coin, *, below, value: torch.where(coin.remainder(16) < below, value, x),
)
# make_inputs draws signed integers from [-8, 8): a coin of 16 equally likely values.
COIN_SPAN = 16


def _fit_int_(x: torch.Tensor, *, span: int, low: int) -> None:
    x.remainder_(span).add_(low)


def _fit_float_(x: torch.Tensor, *, low: float | None, high: float | None) -> None:
    x.clamp_(low, high)


def _fit_float_wide_(x: torch.Tensor, *, low: float | None, high: float | None) -> None:
    x.copy_(x.float().clamp(low, high))


def _fit_unique_(x: torch.Tensor, *, step: int, low: int) -> None:
    x.copy_(FIT_UNIQUE.run(x, step=step, low=low))  # type: ignore[misc]


def _fit_sentinel_(x: torch.Tensor, coin: torch.Tensor, *, below: int, value: float) -> None:
    x.copy_(FIT_SENTINEL.run(x, coin, below=below, value=value))  # type: ignore[misc]


# The same fits in place and returning nothing: as eager breaks they keep every contract,
# so a call can be the first thing in a capture even when its arguments need a fit.
INPLACE = {"mutates": (0,), "aliasing": "inplace", "outputs": 0}
FIT_INT_ = OpSpec(
    "opfit_int_", 1, _same, "{0}.remainder_({span}).add_({low})", run=_fit_int_, **INPLACE
)
FIT_FLOAT_ = OpSpec(
    "opfit_float_", 1, _same, "{0}.clamp_({low}, {high})", run=_fit_float_, **INPLACE
)
FIT_FLOAT_WIDE_ = OpSpec(
    "opfit_float_wide_",
    1,
    _same,
    "{0}.copy_({0}.float().clamp({low}, {high}))",
    run=_fit_float_wide_,
    **INPLACE,
)
FIT_UNIQUE_ = OpSpec(
    "opfit_unique_", 1, _same, "{0}.copy_(" + _UNIQUE + ")", run=_fit_unique_, **INPLACE
)
FIT_SENTINEL_ = OpSpec(
    "opfit_sentinel_", 2, _same, "{0}.copy_(" + _SENTINEL + ")", run=_fit_sentinel_, **INPLACE
)
PRODUCERS = (
    FIT_INT,
    FIT_FLOAT,
    FIT_FLOAT_WIDE,
    FIT_COPY,
    FIT_UNIQUE,
    FIT_SENTINEL,
    FIT_INT_,
    FIT_FLOAT_,
    FIT_FLOAT_WIDE_,
    FIT_UNIQUE_,
    FIT_SENTINEL_,
)


@dataclass(frozen=True)
class UserOp:
    """A loaded spec and its two catalog forms: called directly, and nested in a break."""

    loaded: LoadedSpec
    direct: OpSpec
    nested: OpSpec

    @property
    def spec(self) -> BreakOpSpec:
        return self.loaded.spec


def _unify(spec: BreakOpSpec, metas: Sequence[TensorMeta]) -> dict[str, int] | None:
    """The dim sizes ``metas`` imply for ``spec``'s arguments, or None if they do not fit."""
    if len(metas) != len(spec.args):
        return None
    binding: dict[str, int] = {}
    by_name = dict(zip(spec.args, metas))
    for arg, meta in zip(spec.args.values(), metas):
        wanted = (by_name[arg.dtype].dtype,) if isinstance(arg.dtype, str) else arg.dtypes
        if meta.dtype not in wanted or len(meta.shape) != len(arg.shape):
            return None
        for dim, size in zip(arg.shape, meta.shape):
            if isinstance(dim, int):
                if dim != size:
                    return None
            elif dim in spec.dims and binding.setdefault(dim, size) != size:
                return None
    for dim, size in binding.items():
        low, high = spec.dims[dim]
        if not low <= size <= high:
            return None
    # Expressions (``batch+1``) bind a dim no plain entry names by trying its range.
    expressions = [
        (dim, size)
        for arg, meta in zip(spec.args.values(), metas)
        for dim, size in zip(arg.shape, meta.shape)
        if isinstance(dim, str) and dim not in spec.dims
    ]
    for dim, size in expressions:
        free = sorted(dim_names(dim) - set(binding))
        if len(free) == 1:
            low, high = spec.dims[free[0]]
            fits = [
                v for v in range(low, high + 1) if dim_value(dim, {**binding, free[0]: v}) == size
            ]
            if not fits:
                return None
            binding[free[0]] = fits[0]
    for dim, size in expressions:
        if not dim_names(dim) <= set(binding) or dim_value(dim, binding) != size:
            return None
    return binding


def _infer_for(spec: BreakOpSpec):
    def infer(metas: Sequence[TensorMeta], params: Params) -> Any:
        binding = _unify(spec, metas)
        if binding is None:
            return None
        if isinstance(spec.returns, TensorArg):
            dtype = spec.returns.dtype
            if isinstance(dtype, str):
                dtype = metas[list(spec.args).index(dtype)].dtype
            elif isinstance(dtype, tuple):
                dtype = dtype[0]
            return TensorMeta(resolve_shape(spec.returns, binding), dtype)
        if isinstance(spec.returns, str):
            return metas[list(spec.args).index(spec.returns)]
        return True  # applies; produces no value

    return infer


def _identifier(name: str) -> str:
    return re.sub(r"\W", "_", name)


def _import_source(loaded: LoadedSpec) -> str:
    lines = ["import importlib", "import importlib.util", "import sys", ""]
    if loaded.path is not None:
        # The directory the user's top-level package lives in, so a reproducer run from
        # anywhere imports the same module.
        root = str(Path(loaded.path).resolve().parents[loaded.module.count(".")])
        lines += [f"if {root!r} not in sys.path:", f"    sys.path.insert(0, {root!r})", ""]
    lines += [
        "",
        "def _fresh_module(name):",
        '    """A new copy of the op\'s module: each run of the program (the eager reference,',
        "    the captured run) gets its own module state, as separate processes would, so an op",
        '    keeping state across calls cannot hide it by sharing that state with the reference."""',
        "    try:",
        "        found = importlib.util.find_spec(name)",
        "        module = importlib.util.module_from_spec(found)",
        "        found.loader.exec_module(module)",
        "        return module",
        "    except Exception:  # a module that cannot run twice (it registers something)",
        "        return importlib.import_module(name)",
        "",
        "",
        f"_spec = _fresh_module({loaded.module!r}).{loaded.attr}  # the op under test",
    ]
    return "\n".join(lines) + "\n\n"


def user_op(loaded: LoadedSpec) -> UserOp:
    """The catalog forms of ``loaded``: break ops whose source imports the user's module."""
    spec = loaded.spec
    entry = _identifier(spec.op_name)
    returns_value = spec.returns is not None
    common: dict[str, Any] = {
        "kind": "break",
        "outputs": 1 if returns_value else 0,
        "deterministic": spec.rtol == 0 and spec.atol == 0,
        "rtol": spec.rtol,
        "atol": spec.atol,
        "params": lambda metas: st.fixed_dictionaries(dict(spec.params)),
        "untrusted": True,
    }
    if isinstance(spec.returns, str):
        index = list(spec.args).index(spec.returns)
        common |= {"aliasing": "out", "mutates": (index,)}
    placeholders = ", ".join(f"{{{i}}}" for i in range(len(spec.args)))
    kwargs = "".join(f", {k}={{{k}}}" for k in spec.params)
    source = _import_source(loaded)
    direct = OpSpec(
        f"op:{spec.op_name}",
        len(spec.args),
        _infer_for(spec),
        f"{entry}({placeholders}{kwargs})",
        source=source + f"{entry} = eager_break_during_capture(_spec.call)\n",
        entry=entry,
        **common,
    )
    nested_entry = f"{entry}_nested"
    nested = OpSpec(
        f"op:{spec.op_name}:nested",
        len(spec.args),
        _infer_for(spec),
        f"{nested_entry}({placeholders}{kwargs})",
        source=source
        + "_inner = eager_break_during_capture(_spec.call)\n\n\n"
        + "@eager_break_during_capture\n"
        + f"def {nested_entry}(*tensors, **params):\n"
        + "    # the op called inside another eager break\n"
        + "    return _inner(*tensors, **params)\n",
        entry=nested_entry,
        **common,
    )
    return UserOp(loaded, direct, nested)


def draw_metas(draw: st.DrawFn, spec: BreakOpSpec, binding: Binding) -> list[TensorMeta]:
    """Each argument's shape under ``binding`` and a dtype it may have."""
    dtypes: dict[str, torch.dtype] = {}
    for name, arg in spec.args.items():
        shared = isinstance(arg.dtype, str)
        dtypes[name] = dtypes[arg.dtype] if shared else draw(st.sampled_from(arg.dtypes))  # type: ignore[index]
    return [TensorMeta(resolve_shape(a, binding), dtypes[n]) for n, a in spec.args.items()]


def fit_steps(
    arg: TensorArg, binding: Binding, dtype: torch.dtype, inplace: bool = False
) -> list[tuple[OpSpec, dict]]:
    """The steps that make a raw input satisfy ``arg`` (bounds or distinct values, then the
    sentinel, which takes a raw coin input as its second argument); a copy if it needs none.
    ``inplace`` (fitted arguments only) fits the input itself and returns nothing."""
    low, high = resolve_bound(arg.low, binding), resolve_bound(arg.high, binding)
    steps: list[tuple[OpSpec, dict]] = []
    if arg.unique:
        span = int(high) - int(low) + 1  # type: ignore[arg-type]
        step = span // max(1, math.prod(resolve_shape(arg, binding)))
        steps.append((FIT_UNIQUE_ if inplace else FIT_UNIQUE, {"step": step, "low": int(low)}))  # type: ignore[arg-type]
    elif arg.bounded and dtype.is_floating_point:
        params = {"low": low, "high": high}
        meta = TensorMeta(resolve_shape(arg, binding), dtype)
        if has_kernel(FIT_FLOAT, [meta], params):
            steps.append((FIT_FLOAT_ if inplace else FIT_FLOAT, params))
        else:
            steps.append((FIT_FLOAT_WIDE_ if inplace else FIT_FLOAT_WIDE, params))
    elif arg.bounded:
        if low is None:
            low = int(high) - _RAW_INT_SPAN + 1  # type: ignore[arg-type]
        span = _RAW_INT_SPAN if high is None else int(high) - int(low) + 1
        steps.append((FIT_INT_ if inplace else FIT_INT, {"span": span, "low": int(low)}))
    if arg.sentinel is not None:
        below = max(1, round(arg.rate * COIN_SPAN))
        fit = FIT_SENTINEL_ if inplace else FIT_SENTINEL
        steps.append((fit, {"below": below, "value": arg.sentinel}))
    return steps or [(FIT_COPY, {})]


def coin_meta(arg: TensorArg, binding: Binding) -> TensorMeta:
    """The raw input a sentinel fit draws its coin from."""
    return TensorMeta(resolve_shape(arg, binding), torch.int64)


def _consumers(catalog: Sequence[OpSpec], meta: TensorMeta) -> list[OpSpec]:
    return [
        s
        for s in catalog
        if s.kind == "capturable"
        and s.arity == 1
        and s.aliasing == "none"
        and s.outputs == 1
        and not s.out_buffers
        and s.deterministic
        and not s.rng
        and s.infer([meta], {}) is not None
        and has_kernel(s, [meta])
    ]


@st.composite
def _call_chain(
    draw: st.DrawFn,
    users: Sequence[UserOp],
    catalog: Sequence[OpSpec],
    where: str,
) -> Program:
    """One call of a user op as a small program: producers, the call, consumers."""
    user = draw(st.sampled_from(list(users)))
    spec = user.spec
    binding = {d: draw(st.integers(lo, hi)) for d, (lo, hi) in spec.dims.items()}
    metas = draw_metas(draw, spec, binding)
    coins: dict[int, int] = {}
    for index, arg in enumerate(spec.args.values()):
        if arg.sentinel is not None:
            coins[index] = len(metas)
            metas.append(coin_meta(arg, binding))
    env = list(metas)
    steps: list[Step] = []
    args: list[int] = []
    for index, arg in enumerate(spec.args.values()):
        # A raw input for unfitted arguments; fitted ones are fitted by captured steps or
        # in place by eager ones, and a call first in the capture has no captured producer.
        modes = ["eager"] if arg.fitted else ["raw"]
        if where != "first":
            modes.append("captured")
        mode = draw(st.sampled_from(modes))
        if mode == "raw":
            args.append(index)
            continue
        value = index
        for fit, params in fit_steps(arg, binding, metas[index].dtype, mode == "eager"):
            items = tuple(sorted(params.items()))
            operands = (value, coins[index]) if fit.arity == 2 else (value,)
            steps.append(Step(fit.name, operands, items, mode == "eager"))
            if fit.outputs:
                value = len(env)
                env.append(metas[index])
        args.append(value)
    op = user.nested if draw(st.integers(0, 3)) == 0 else user.direct
    params = draw(st.fixed_dictionaries(dict(spec.params)))
    steps.append(Step(op.name, tuple(args), tuple(sorted(params.items())), True))
    results = [args[list(spec.args).index(w)] for w in spec.written]
    if op.outputs:
        out = op.infer([env[a] for a in args], params)
        if isinstance(spec.returns, TensorArg):
            results.append(len(env))
        env.append(out)
    outputs = list(results)
    for _ in range(0 if where == "last" else draw(st.integers(0, 2))):
        if not results:
            break
        value = draw(st.sampled_from(results))
        fitting = _consumers(catalog, env[value])
        if not fitting:
            continue
        consumer = draw(st.sampled_from(fitting))
        consumer_params = draw(consumer.params([env[value]]))
        if not has_kernel(consumer, [env[value]], consumer_params):
            continue
        steps.append(Step(consumer.name, (value,), tuple(sorted(consumer_params.items())), False))
        outputs.append(len(env))
        env.append(consumer.infer([env[value]], consumer_params))
    return Program(tuple(metas), tuple(steps), tuple(outputs))


def splice(
    base: Program, chains: Sequence[tuple[int, Program]], table: dict[str, OpSpec]
) -> Program:
    """``base`` with each chain's steps inserted before base step ``position``, renumbered."""
    inputs = list(base.inputs)
    chain_inputs = []
    for _, chain in chains:
        chain_inputs.append(len(inputs))
        inputs.extend(chain.inputs)
    steps: list[Step] = []
    outputs: list[int] = []
    next_value = len(inputs)

    def emit(step: Step, mapping: dict[int, int]) -> None:
        nonlocal next_value
        steps.append(Step(step.op, tuple(mapping[a] for a in step.args), step.params, step.brk))
        if table[step.op].outputs > 0:
            mapping[len(mapping)] = next_value
            next_value += 1

    base_map = {v: v for v in range(len(base.inputs))}
    order = sorted(range(len(chains)), key=lambda i: chains[i][0])
    pending = list(order)
    for position in range(len(base.steps) + 1):
        while pending and chains[pending[0]][0] == position:
            i = pending.pop(0)
            chain = chains[i][1]
            mapping = {v: chain_inputs[i] + v for v in range(len(chain.inputs))}
            for step in chain.steps:
                emit(step, mapping)
            outputs.extend(mapping[v] for v in chain.outputs)
        if position < len(base.steps):
            emit(base.steps[position], base_map)
    outputs = [base_map[v] for v in base.outputs] + outputs
    unique = tuple(dict.fromkeys(outputs))
    return Program(tuple(inputs), with_drops(steps, unique), unique)


def op_catalog(users: Sequence[UserOp], catalog: Sequence[OpSpec] | None = None) -> list[OpSpec]:
    """The op table a campaign needs: the catalog, the producers and each user op's forms."""
    base = list(default_ops() if catalog is None else catalog)
    return [*base, *PRODUCERS, *(op for u in users for op in (u.direct, u.nested))]


@st.composite
def op_programs(
    draw: st.DrawFn,
    users: Sequence[UserOp],
    max_ops: int = 6,
    max_breaks: int = 2,
    contract: str | Contract = "returns",
    catalog: Sequence[OpSpec] | None = None,
) -> Program:
    """A random catalog program with 1 to 3 calls of the user ops spliced in."""
    ops = list(default_ops() if catalog is None else catalog)
    base = draw(
        programs(
            max_ops=max_ops,
            max_breaks=max_breaks,
            ops=ops,
            contract=contract,
        )
    )
    chains = []
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["first", "last", "anywhere", "anywhere"]))
        position = {"first": 0, "last": len(base.steps)}.get(where)
        if position is None:
            position = draw(st.integers(0, len(base.steps)))
        chain = draw(_call_chain(users, ops, where))
        chains.append((position, chain))
    return splice(base, chains, op_table(op_catalog(users, ops)))


def break_positions(program: Program, user_op_names: set[str]) -> list[set[str]]:
    """For each call of a user op, where it sits among the program's graph segments."""
    steps = program.steps
    captured = [i for i, s in enumerate(steps) if not s.brk]
    found = []
    for i, step in enumerate(steps):
        if step.op not in user_op_names:
            continue
        where = set()
        if step.op.endswith(":nested"):
            where.add("nested")
        if not any(c < i for c in captured):
            where.add("first")
        if not any(c > i for c in captured):
            where.add("last")
        if (i > 0 and steps[i - 1].brk) or (i + 1 < len(steps) and steps[i + 1].brk):
            where.add("adjacent")
        if not where & {"first", "last"}:
            where.add("middle")
        found.append(where)
    return found


def value_names(program: Program, users: Sequence[UserOp]) -> dict[int, str]:
    """What each program value is, in the spec's words, for values a user op wrote or
    returned and those computed from them: findings name ``'kv_cache'``, not value 4."""
    by_op = {op.name: user for user in users for op in (user.direct, user.nested)}
    table = op_table(op_catalog(users))
    names: dict[int, str] = {}
    value = len(program.inputs)
    for index, step in enumerate(program.steps):
        user = by_op.get(step.op)
        if user is not None:
            spec = user.spec
            for position, arg in enumerate(step.args):
                name = list(spec.args)[position]
                if name in spec.written:
                    names[arg] = f"argument {name!r} of {spec.op_name} (step {index})"
        if not produces_value(table[step.op]):
            continue
        if user is not None:
            names[value] = f"the tensor {user.spec.op_name} returns (step {index})"
        else:
            sources = [names[a] for a in step.args if a in names]
            if sources:
                names[value] = f"computed from {sources[0].split(' (step')[0]}"
        value += 1
    return names
