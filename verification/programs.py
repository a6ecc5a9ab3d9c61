"""Programs the fuzzer runs, as plain data, and the hypothesis strategy that draws them.

A :class:`Program` is static inputs, a list of :class:`Step` (an op name, the value numbers
it reads, its params, whether it runs inside an eager break, and the values that die after
it) and the value numbers it returns. :func:`programs` builds only programs whose every
step fits its arguments (checked with the catalog's ``infer``), from simple choices so
that hypothesis shrinks a failure to a handful of steps. :func:`make_inputs` gives the
deterministic input values for a seed.

An engine-shaped program (``programs(engine=True)`` draws them beside the plain ones) also
takes host values (``Program.host`` sequences of :mod:`verification.ops.host` metadata,
rewritten in place before every replay), and its engine break steps (the catalog's
``ENGINE_OPS``) name the form in which they are given those values (``Step.host``) and a
function slot (``Step.fn``): steps of one op and slot call one decorated function, as every
layer of a model calls one attention op.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import reject
from hypothesis import strategies as st

from verification.ops.ambient import AMBIENT
from verification.ops.bindings import BINDINGS
from verification.ops.breaks import ENGINE_KEY
from verification.ops.host import HOST_FORMS
from verification.ops.kernels import has_kernel
from verification.ops.out_buffer import (
    ALLOC,
    has_out_buffer_forms,
    nests_a_returning_break,
    nests_a_writing_break,
    out_buffer_forms,
    with_out_buffer_forms,
)
from verification.ops.spec import OpSpec, TensorMeta
from verification.targets.contracts import Contract, get_contract


@dataclass(frozen=True)
class Step:
    """One op call: ``op`` reads values ``args``; ``brk`` runs it inside an eager break.

    ``host``: the form (:data:`~verification.ops.host.HOST_FORMS`) in which the program's host
    values are passed after the tensors ("" for none); ``fn``: the function slot an engine
    break shares with every other step of its op and slot (-1: a function of its own).
    ``ambient``: the ``with`` block of :data:`~verification.ops.ambient.AMBIENT` the step is
    called in ("" for none); ``tag``: its tensor arguments carry a Python attribute;
    ``bind``: how the decorated callable is defined (:data:`~verification.ops.bindings.BINDINGS`,
    "" for a plain function; a shared function takes its first step's).
    """

    op: str
    args: tuple[int, ...]
    params: tuple[tuple[str, Any], ...]
    brk: bool
    drop: tuple[int, ...] = ()
    host: str = ""
    fn: int = -1
    ambient: str = ""
    tag: bool = False
    bind: str = ""

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.params)


@dataclass(frozen=True)
class Program:
    """Inputs are values ``0..len(inputs)-1``; each step with an output defines the next.

    ``host``: how many sequences the host metadata describes (0: the program takes none).
    """

    inputs: tuple[TensorMeta, ...]
    steps: tuple[Step, ...]
    outputs: tuple[int, ...]
    host: int = 0

    @property
    def num_breaks(self) -> int:
        return sum(step.brk for step in self.steps)


def call_way(step: Step) -> str:
    """How a step is called, in words, where it differs from a plain positional call of a
    plain function: what a finding at the step says beside the error."""
    ways = [f"defined as {BINDINGS[step.bind]}"] if step.bind else []
    if step.ambient:
        ways.append(f"called inside `with {AMBIENT[step.ambient]}`")
    if step.tag:
        ways.append("its tensors carrying a Python attribute")
    if step.host:
        ways.append(f"handed the host values as {HOST_FORMS[step.host]}")
    if step.fn >= 0:
        ways.append("one function shared with other steps")
    return "; ".join(ways)


def default_ops() -> tuple[OpSpec, ...]:
    """The shipped catalog; imported late so that tests can run on a catalog of their own."""
    from verification.ops import ALL_OPS

    return tuple(ALL_OPS.values())


def engine_ops() -> tuple[OpSpec, ...]:
    from verification.ops.breaks import ENGINE_OPS

    return tuple(ENGINE_OPS)


def default_input_dtypes() -> tuple[torch.dtype, ...]:
    from verification.ops import INPUT_DTYPES

    return tuple(INPUT_DTYPES)


def op_table(ops: Sequence[OpSpec] | None = None) -> dict[str, OpSpec]:
    """Every op a program may name: ``ops`` (default: the catalog), the buffer allocation
    and the out-buffer forms derived from them."""
    if ops is None:
        return dict(_default_table())
    return dict(_table_of(tuple(ops)))


@functools.cache
def _default_table() -> dict[str, OpSpec]:
    return _table_of(default_ops())


# Checks call op_table for every example with the same few catalogs; deriving the out-buffer
# forms each time cost more than the lookup it serves.
@functools.lru_cache(maxsize=16)
def _table_of(ops: tuple[OpSpec, ...]) -> dict[str, OpSpec]:
    table = {spec.name: spec for spec in with_out_buffer_forms(ops)}
    # Engine ops are named by engine-shaped programs whatever catalog drew the rest.
    return {**{spec.name: spec for spec in engine_ops()}, **table}


def produces_value(spec: OpSpec) -> bool:
    return spec.outputs > 0


def value_producers(program: Program, table: Mapping[str, OpSpec]) -> dict[int, int]:
    """Which step produced each value of ``program`` (inputs are none's), in order."""
    producers, value = {}, len(program.inputs)
    for index, step in enumerate(program.steps):
        if produces_value(table[step.op]):
            producers[value] = index
            value += 1
    return producers


# Input values are built from these expressions (``g`` is a seeded CPU generator) both here
# and in reproducer scripts, so that a reproducer sees exactly the fuzzer's values. Integers
# stay small and non-zero-heavy so that arithmetic ops neither overflow nor degenerate.
_INPUT_EXPRS: tuple[tuple[str, str], ...] = (
    ("bool", "torch.randint(0, 2, {shape}, generator=g).to(torch.bool)"),
    ("complex", "torch.randn({shape}, generator=g, dtype=torch.complex64).to({dtype})"),
    ("float", "torch.randn({shape}, generator=g).to({dtype})"),
    ("unsigned", "torch.randint(0, 8, {shape}, generator=g).to({dtype})"),
    ("signed", "torch.randint(-8, 8, {shape}, generator=g).to({dtype})"),
)


def _dtype_family(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "bool"
    if dtype.is_complex:
        return "complex"
    if dtype.is_floating_point:
        return "float"
    return "signed" if dtype.is_signed else "unsigned"


def input_expr(meta: TensorMeta) -> str:
    """Python text that builds a CPU value for ``meta`` from generator ``g``."""
    template = dict(_INPUT_EXPRS)[_dtype_family(meta.dtype)]
    return template.format(shape=tuple(meta.shape), dtype=str(meta.dtype))


def make_inputs(program: Program, seed: int, device: str) -> list[torch.Tensor]:
    """Deterministic random values for the program's inputs under ``seed``."""
    g = torch.Generator().manual_seed(seed)
    namespace = {"torch": torch, "g": g}
    return [eval(_compiled_expr(input_expr(meta)), namespace).to(device) for meta in program.inputs]


@functools.lru_cache(maxsize=4096)
def _compiled_expr(expr: str) -> Any:
    # Programs reuse a few input shapes; parsing the text again for each input is wasted.
    return compile(expr, "<input>", "eval")


def break_step_allowed(
    spec: OpSpec, allow_tensor_returns: bool, device_returns: bool = True
) -> bool:
    """Whether a step of ``spec`` may run inside a break under a contract that refreshes
    returned tensors (``allow_tensor_returns``) or not (``out-buffer``), and that lets a
    break return a device tensor at all (``device_returns``) or not (``no-device-returns``).

    Under ``returns`` a break may return a fresh tensor, but not a view or in-place result.
    Under ``out-buffer`` it returns nothing or one of its arguments: ops with a fresh result
    run as breaks only through their out-buffer forms (:mod:`verification.ops.out_buffer`).
    Under ``no-device-returns`` it returns nothing: out-buffer forms that nest no returning
    break, and ops without a result.
    """
    if spec is ALLOC:
        return False
    if spec.out_buffers:
        nested = nests_a_writing_break(spec) if device_returns else nests_a_returning_break(spec)
        return not allow_tensor_returns and not nested
    if not produces_value(spec):
        return True
    if not device_returns:
        return False
    if spec.kind == "break":
        # A break op that writes an argument in place returns that argument: both contracts.
        return allow_tensor_returns or spec.aliasing in ("inplace", "out")
    if allow_tensor_returns:
        return spec.aliasing == "none"
    return spec.aliasing in ("inplace", "out")


def _fits(spec: OpSpec, metas: Sequence[TensorMeta]) -> bool:
    # Applicability is judged before params are drawn; an infer that needs its params
    # cannot judge yet, so the step is checked again once params exist.
    # ``infer`` is a pure function of its metas, and every step of a draw asks again about
    # the argument tuples of the steps before it, so answers are kept (by function: two
    # catalogs may give different ops one name).
    key = (spec.infer, tuple(metas))
    fits = _fits_cache.get(key)
    if fits is None:
        try:
            fits = spec.infer(metas, {}) is not None and has_kernel(spec, metas)
        except (KeyError, TypeError, IndexError):
            fits = True
        if len(_fits_cache) >= _FITS_CACHE_LIMIT:
            _fits_cache.clear()
        _fits_cache[key] = fits
    return fits


_fits_cache: dict[tuple[Any, tuple[TensorMeta, ...]], bool] = {}
_FITS_CACHE_LIMIT = 1 << 16


# More than this many argument tuples per op would make drawing a step slow.
_MAX_TUPLES = 512


def _writes_into_another_argument(
    spec: OpSpec, args: Sequence[int], memory: Mapping[int, int]
) -> bool:
    """Whether a written argument shares memory with another argument of the same call.

    torch refuses in-place writes whose destination partially overlaps an input
    (``a.add_(a.mT)``); values with the same memory root are treated as overlapping.
    """
    return any(
        memory[args[w]] == memory[a] for w in spec.mutates for i, a in enumerate(args) if i != w
    )


def _arg_tuples(
    spec: OpSpec,
    live: Sequence[int],
    env: Mapping[int, TensorMeta],
    overlapping: set[int],
    memory: Mapping[int, int],
):
    """Argument tuples from live values; an out-buffer op's buffers are not among them."""
    arity = spec.arity - spec.out_buffers
    mutates = [i for i in spec.mutates if i < arity]
    combos = itertools.islice(itertools.product(live, repeat=arity), _MAX_TUPLES)
    return [
        args
        for args in combos
        if not any(args[i] in overlapping for i in mutates)
        and not (mutates and _writes_into_another_argument(spec, args, memory))
        and _fits(spec, [env[a] for a in args])
    ]


def _numel(meta: TensorMeta) -> int:
    return int(torch.Size(meta.shape).numel())


def _overlaps(spec: OpSpec, args: Sequence[int], out: TensorMeta, env, overlapping) -> bool:
    """Whether the new value may have elements sharing memory (torch refuses to write those).

    A view with more elements than its input (an expand) overlaps, and aliasing results
    inherit overlap from their inputs.
    """
    if spec.aliasing == "none" or not args:
        return False
    grows = spec.aliasing == "view" and _numel(out) > _numel(env[args[0]])
    return grows or any(a in overlapping for a in args)


_shapes = st.lists(st.integers(1, 8), min_size=0, max_size=3).map(tuple)
_booleans = st.booleans()


# A program draw asks for a few dozen strategies, mostly the same ones every time. Building
# and validating a strategy costs more than drawing from it, so equal strategies are built
# once; a strategy is stateless, so one drawn twice draws exactly as two equal ones would.
@functools.cache
def _integers(low: int, high: int) -> st.SearchStrategy[int]:
    return st.integers(low, high)


@functools.lru_cache(maxsize=4096)
def _sampled_from(elements: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    return st.sampled_from(elements)


@functools.lru_cache(maxsize=4096)
def _params(
    params: Callable[[Sequence[TensorMeta]], st.SearchStrategy[dict[str, Any]]],
    metas: tuple[TensorMeta, ...],
) -> st.SearchStrategy[dict[str, Any]]:
    return params(metas)


@functools.lru_cache(maxsize=4096)
def _outputs(candidates: tuple[int, ...]) -> st.SearchStrategy[list[int]]:
    return st.lists(_sampled_from(candidates), min_size=1, max_size=3, unique=True)


@st.composite
def _inputs(draw: st.DrawFn, dtypes: Sequence[torch.dtype]) -> tuple[TensorMeta, ...]:
    count = draw(_integers(1, 4))
    metas: list[TensorMeta] = []
    for _ in range(count):
        # Reusing an earlier shape makes elementwise ops between inputs applicable.
        shape = draw(
            _sampled_from(tuple(m.shape for m in metas)) if metas and draw(_booleans) else _shapes
        )
        metas.append(TensorMeta(shape, draw(_sampled_from(tuple(dtypes)))))
    return tuple(metas)


@functools.cache
def _inputs_of(dtypes: tuple[torch.dtype, ...]) -> st.SearchStrategy[tuple[TensorMeta, ...]]:
    return _inputs(dtypes)


def with_drops(steps: Sequence[Step], outputs: Sequence[int]) -> tuple[Step, ...]:
    """Marks each value dead right after its last use (never outputs)."""
    last_use: dict[int, int] = {}
    for index, step in enumerate(steps):
        for value in step.args:
            last_use[value] = index
    dying: dict[int, list[int]] = {}
    for value, index in last_use.items():
        if value not in outputs:
            dying.setdefault(index, []).append(value)
    return tuple(
        dataclasses.replace(s, drop=tuple(sorted(dying.get(i, ())))) for i, s in enumerate(steps)
    )


@st.composite
def programs(
    draw: st.DrawFn,
    max_ops: int = 8,
    max_breaks: int = 3,
    ops: Sequence[OpSpec] | None = None,
    allow_tensor_returns: bool | None = None,
    input_dtypes: Sequence[torch.dtype] | None = None,
    contract: str | Contract = "returns",
    outputs_may_be_inputs: bool = False,
    engine: bool = False,
) -> Program:
    """Random valid programs of 1..``max_ops`` steps with at most ``max_breaks`` breaks,
    whose breaks keep ``contract`` (under ``out-buffer`` ops with a fresh result run as
    breaks through their out-buffer forms). ``allow_tensor_returns`` is the older spelling of
    ``contract`` (True: ``returns``, False: ``out-buffer``). ``outputs_may_be_inputs``: the
    program may return its inputs themselves (a check of what a wrapper returns wants that).
    ``engine``: half the programs are engine-shaped (host values, shared engine breaks), on
    the default catalog only."""
    if allow_tensor_returns is not None:
        contract = "returns" if allow_tensor_returns else "out-buffer"
    allow_tensor_returns = get_contract(contract).refreshes_returns
    device_returns = get_contract(contract).device_returns
    catalog = tuple(default_ops() if ops is None else ops)

    def convertible(spec: OpSpec) -> bool:
        """Under out-buffer, an op with a fresh result runs as a break in an out-buffer form."""
        return not allow_tensor_returns and has_out_buffer_forms(spec)

    usable = [
        s
        for s in catalog
        if s is not ALLOC
        and not s.out_buffers
        and (
            s.kind != "break"
            or break_step_allowed(s, allow_tensor_returns, device_returns)
            or convertible(s)
        )
    ]
    inputs = draw(
        _inputs_of(tuple(default_input_dtypes() if input_dtypes is None else input_dtypes))
    )
    env: dict[int, TensorMeta] = dict(enumerate(inputs))
    next_value = len(inputs)
    # Static buffers (allocated before the capture) are numbered -1, -2, ... while drawing
    # and become inputs after the drawn ones at the end.
    static: list[TensorMeta] = []
    steps: list[Step] = []
    overlapping: set[int] = set()
    # The value whose memory each value lives in (itself unless it is a view or in-place result).
    memory: dict[int, int] = {v: v for v in env}
    breaks = 0
    # Drawn first, so that a failure that needs no engine shape shrinks to a plain program.
    host = draw(_integers(1, 3)) if engine and ops is None and draw(_booleans) else 0
    engine_specs = [s for s in engine_ops() if break_step_allowed(s, allow_tensor_returns)]
    # Arguments of breaks that may return them: an engine reads its logits after the logits
    # processor too, and only a later read tells an aliased result from a new one.
    read_after: list[int] = []
    # Per step: the value it makes, and the memory (by root) it writes in place; a break
    # whose result is written in place later cannot be called in inference mode (eager
    # raises on an in-place update of an inference tensor outside it, at capture as here).
    made: dict[int, int] = {}
    writes: dict[int, set[int]] = {}
    for _ in range(draw(_integers(1, max_ops))):
        live = sorted(env)
        if host and breaks < max_breaks and draw(_booleans):
            drawn = _engine_step(draw, engine_specs, live, env, overlapping, len(steps))
            if drawn is not None:
                spec, step = drawn
                breaks += 1
                writes[len(steps)] = {memory[step.args[m]] for m in spec.mutates}
                made[len(steps)] = next_value
                steps.append(step)
                if spec.alias_varies:
                    read_after.append(step.args[0])
                env[next_value] = spec.infer([env[step.args[0]]], step.kwargs)
                memory[next_value] = memory[step.args[0]]
                if step.args[0] in overlapping:
                    overlapping.add(next_value)
                next_value += 1
                continue
        # Break ops are few in the catalog; asking for one a quarter of the time keeps
        # every kind of break common. Otherwise the drawn op, or the next one that fits.
        want_break = breaks < max_breaks and draw(_integers(0, 3)) == 3
        pool = [s for s in usable if (s.kind == "break") == want_break] or usable
        start = draw(_integers(0, len(pool) - 1))
        for offset in range(len(pool)):
            spec = pool[(start + offset) % len(pool)]
            if spec.kind == "break" and breaks >= max_breaks:
                continue
            tuples = _arg_tuples(spec, live, env, overlapping, memory)
            if tuples:
                break
        else:
            break
        args = draw(_sampled_from(tuple(tuples)))
        metas = [env[a] for a in args]
        params = draw(_params(spec.params, tuple(metas)))
        out = spec.infer(metas, params)
        if out is None or not has_kernel(spec, metas, params):
            reject()
        brk = spec.kind == "break"
        convert = brk and not break_step_allowed(spec, allow_tensor_returns, device_returns)
        if (
            not brk
            and breaks < max_breaks
            and break_step_allowed(spec, allow_tensor_returns, device_returns)
        ):
            brk = draw(_integers(0, 3)) == 0
        elif not brk and breaks < max_breaks and convertible(spec):
            convert = brk = draw(_integers(0, 3)) == 0
        buffers: list[int] = []
        if convert:
            forms = out_buffer_forms(spec)
            spec = draw(
                _sampled_from(
                    tuple(
                        f
                        for f in forms
                        if break_step_allowed(f, allow_tensor_returns, device_returns)
                    )
                )
            )
            assert spec.buffer_metas is not None and args
            for meta in spec.buffer_metas(metas, params):
                if draw(_booleans):
                    # Inside the capture: the buffer lives in the graph pool.
                    alloc = (("dtype", meta.dtype), ("shape", meta.shape))
                    steps.append(Step(ALLOC.name, (args[0],), alloc, False))
                    buffer, next_value = next_value, next_value + 1
                else:
                    static.append(meta)
                    buffer = -len(static)
                env[buffer], memory[buffer] = meta, buffer
                buffers.append(buffer)
            args = (*args, *buffers)
            metas = [env[a] for a in args]
            out = spec.infer(metas, params)
            assert out is not None, f"{spec.name} does not fit its own buffers"
        breaks += brk
        writes[len(steps)] = {memory[args[m]] for m in spec.mutates}
        if produces_value(spec):
            made[len(steps)] = next_value
        steps.append(Step(spec.name, tuple(args), tuple(sorted(params.items())), brk))
        if produces_value(spec):
            if _overlaps(spec, args, out, env, overlapping):
                overlapping.add(next_value)
            root = next_value
            if spec.aliasing != "none" and args:
                root = memory[args[spec.mutates[0] if spec.mutates else 0]]
            memory[next_value] = root
            env[next_value] = out
            next_value += 1
        # A raw buffer is read only through what its break returns.
        for buffer in buffers:
            del env[buffer]
    if not steps:
        reject()
    # Returning an input unchanged checks nothing; prefer values the steps computed.
    candidates = [v for v in sorted(env) if outputs_may_be_inputs or v >= len(inputs)]
    candidates = candidates or sorted(env)
    chosen = draw(_outputs(tuple(candidates)))
    # The last value is usually the interesting one; a shrunk program keeps it.
    outputs = tuple(sorted({candidates[-1], *chosen} if draw(_booleans) else set(chosen)))
    kept = [v for v in read_after if v in env]
    if kept and draw(_booleans):
        outputs = tuple(sorted({*outputs, *kept}))
    # Drawn last, so that a failure that needs neither shrinks to plain calls.
    written_later = [
        set().union(*(writes.get(j, set()) for j in range(i + 1, len(steps))))
        for i in range(len(steps))
    ]
    steps = [
        _called(
            draw,
            step,
            autocast=_autocast_safe(step, env),
            inference=i not in made or memory[made[i]] not in written_later[i],
        )
        if step.brk
        else step
        for i, step in enumerate(steps)
    ]
    return _with_static_buffers(inputs, static, steps, outputs, host)


_AMBIENT_WAYS = ("", *AMBIENT)
_BINDING_WAYS = tuple(BINDINGS)
# Autocast runs an op on these as eager does; on others (float64, float8) torch's autocast
# raises inside the op ("Unexpected floating ScalarType"), eager as at replay.
_AUTOCAST_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16})


def _autocast_safe(step: Step, env: Mapping[int, TensorMeta]) -> bool:
    return all(
        a in env and (env[a].dtype in _AUTOCAST_DTYPES or not env[a].dtype.is_floating_point)
        for a in step.args
    )


def _called(draw: st.DrawFn, step: Step, *, autocast: bool, inference: bool) -> Step:
    """``step`` (a break), a quarter of the time called inside a ``with`` block of the region
    (autocast only where its arguments are of dtypes autocast takes, inference mode only
    where nothing writes its result in place later), a quarter of the time with its
    tensors tagged, and a quarter of the time defined otherwise than as a plain function."""
    ways = tuple(
        way
        for way in _AMBIENT_WAYS
        if (autocast or not way.startswith("autocast")) and (inference or way != "inference_mode")
    )
    way = draw(_sampled_from(ways)) if draw(_integers(0, 3)) == 3 else ""
    tagged = draw(_integers(0, 3)) == 3
    bind = draw(_sampled_from(_BINDING_WAYS)) if draw(_integers(0, 3)) == 3 else ""
    if not (way or tagged or bind):
        return step
    return dataclasses.replace(step, ambient=way, tag=tagged, bind=bind)


def _engine_step(
    draw: st.DrawFn,
    specs: Sequence[OpSpec],
    live: Sequence[int],
    env: Mapping[int, TensorMeta],
    overlapping: set[int],
    position: int,
) -> tuple[OpSpec, Step] | None:
    """An engine break op and its step on one live value, with its host form and function
    slot; None when no live value fits. Engine ops write their argument in place or return it or
    a new tensor, so their result shares the argument's memory as far as drawing knows. An op
    keyed by its step (:data:`~verification.ops.breaks.ENGINE_KEY`) gets ``position``."""
    spec = draw(_sampled_from(tuple(specs)))
    fits = tuple(
        v
        for v in live
        if not (spec.mutates and v in overlapping) and spec.infer([env[v]], {}) is not None
    )
    if not fits:
        return None
    arg = draw(_sampled_from(fits))
    params = draw(_params(spec.params, (env[arg],)))
    if ENGINE_KEY in params:
        params = {**params, ENGINE_KEY: position}
    form = draw(_sampled_from(tuple(HOST_FORMS)))
    # Mostly the op's one function, as every layer calls one attention; sometimes a second.
    slot = int(draw(_integers(0, 3)) == 3)
    return spec, Step(spec.name, (arg,), tuple(sorted(params.items())), True, host=form, fn=slot)


def _with_static_buffers(
    inputs: tuple[TensorMeta, ...],
    static: Sequence[TensorMeta],
    steps: Sequence[Step],
    outputs: tuple[int, ...],
    host: int = 0,
) -> Program:
    """The program with static buffers as inputs after the drawn ones, values renumbered."""

    def number(v: int) -> int:
        if v < 0:
            return len(inputs) - v - 1
        return v if v < len(inputs) else v + len(static)

    renumbered = [dataclasses.replace(s, args=tuple(map(number, s.args)), drop=()) for s in steps]
    final_outputs = tuple(map(number, outputs))
    return Program((*inputs, *static), with_drops(renumbered, final_outputs), final_outputs, host)
