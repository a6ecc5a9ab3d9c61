"""Checks a user's break op against the contract its :class:`BreakOpSpec` declares.

:func:`diagnose` runs the op on its own, and beside an open capture, on inputs drawn from
the spec, and returns one :class:`~verification.findings.Finding` per part of the contract it broke, in plain
words: declared writes (and masked writes), index bounds, duplicate indices, strided
arguments (each drawn in a layout an engine passes, against contiguous copies), determinism,
dependence on earlier calls (a frozen host value, a stashed tensor, a call counter, a cache
keyed on version counters, state keyed without a dtype or size, a crash a fresh import does
not show), state one batch size leaves for another when an engine's capture set calls the op
at several sizes, side streams unordered with the caller's either way, and calls that break
a concurrent ``global``-mode capture. Every check is one entry of :data:`CHECKS`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from verification.findings import OP_BUG, Finding
from verification.ops.spec import TensorMeta
from verification.oracle import Tolerance, compare
from verification.programs import input_expr
from verification.userops.programs import coin_meta, draw_metas, fit_steps
from verification.userops.spec import (
    BreakOpSpec,
    LoadedSpec,
    TensorArg,
    dim_names,
    resolve_bound,
    resolve_shape,
)

# The check name of an op contract's findings; each names the broken part as its violation.
CONTRACT = "contract"
# The part whose violation makes every comparison of values with a reference unreliable.
NONDETERMINISTIC = "deterministic"


@dataclass(frozen=True)
class Case:
    """Concrete sizes, argument metas and params for one call of the op.

    ``layouts`` holds each argument's memory layout, one of :data:`LAYOUTS` (none given:
    all contiguous); ``after`` the calls the same imported op made before this one, when
    the finding is about what those calls left behind."""

    binding: dict[str, int]
    metas: tuple[TensorMeta, ...]
    params: dict[str, Any]
    seed: int
    layouts: tuple[str, ...] = ()
    after: tuple[Case, ...] = ()


# How a tensor argument may sit in memory. "column slice": each row the middle third of a
# buffer's row three times as long, as q, k or v are sliced out of a fused qkv projection (a
# 1-dim argument: every other element); "offset": contiguous, at a storage offset into a
# larger buffer; "transposed": the last two dims swapped in memory (two dims or more).
CONTIGUOUS = "contiguous"
LAYOUTS = ("column slice", "transposed", "offset", CONTIGUOUS)
_LAYOUT_WORDS = {
    "column slice": "a column slice of a wider buffer (as q/k/v sliced from a fused qkv)",
    "transposed": "a transposed view",
    "offset": "contiguous at a storage offset into a larger buffer",
}


def layouts_for(arg: TensorArg, ndim: int) -> tuple[str, ...]:
    """The layouts an argument of ``ndim`` dims may come in (only contiguous if declared so)."""
    if arg.contiguous:
        return (CONTIGUOUS,)
    return tuple(lay for lay in LAYOUTS if lay != "transposed" or ndim >= 2)


def broken(
    part: str,
    message: str,
    *,
    raised: bool = False,
    case: Case | None = None,
    tentative: bool = False,
) -> Finding:
    """One broken part of an op's contract; ``message`` says how, and what to do instead.

    Its scenario keeps the drawn call it broke on (``case``, which :func:`recheck` runs
    again in a reproducer), whether the op raised rather than broke the part (another
    part's finding may explain that), and whether a later draw may name the fault better
    (``tentative``: an output left as it was may be one the op only reads)."""
    scenario: tuple[tuple[str, Any], ...] = (("raised", raised),)
    if tentative:
        scenario += (("tentative", True),)
    if case is not None:
        scenario += (("case", case),)
    return Finding(OP_BUG, CONTRACT, message, violation=part, scenario=scenario)


def case_of(finding: Finding) -> Case | None:
    """The drawn call a contract finding broke on, if any."""
    return dict(finding.scenario).get("case")


def _raised(finding: Finding) -> bool:
    return bool(dict(finding.scenario).get("raised"))


@st.composite
def cases(draw: st.DrawFn, spec: BreakOpSpec) -> Case:
    binding = {d: draw(st.integers(lo, hi)) for d, (lo, hi) in spec.dims.items()}
    metas = tuple(draw_metas(draw, spec, binding))
    params = draw(st.fixed_dictionaries(dict(spec.params)))
    seed = draw(st.integers(0, 2**16))
    layouts = tuple(
        draw(st.sampled_from(layouts_for(arg, len(meta.shape))))
        for arg, meta in zip(spec.args.values(), metas)
    )
    return Case(binding, metas, params, seed, layouts)


def materialize(spec: BreakOpSpec, case: Case, seed: int, device: str) -> dict[str, torch.Tensor]:
    """Argument values for ``case`` meeting the spec's declarations (the fuzzer's producers)."""
    g = torch.Generator().manual_seed(seed)
    values = {}
    for (name, arg), meta in zip(spec.args.items(), case.metas):
        value = eval(input_expr(meta), {"torch": torch, "g": g}).to(device)
        for fit, params in fit_steps(arg, case.binding, meta.dtype):
            if fit.arity == 2:
                coin = eval(input_expr(coin_meta(arg, case.binding)), {"torch": torch, "g": g})
                value = fit.run(value, coin.to(device), **params)  # type: ignore[misc]
            else:
                value = fit.run(value, **params)  # type: ignore[misc]
        values[name] = value
    return values


def _outputs(spec: BreakOpSpec, args: dict[str, torch.Tensor], result: Any) -> list[torch.Tensor]:
    """What later code reads after a call: the written arguments, then a returned tensor."""
    outs = [args[w].clone() for w in spec.written]
    if isinstance(result, torch.Tensor):
        outs.append(result.clone())
    return outs


def _comparable(t: torch.Tensor) -> torch.Tensor:
    # One-byte floats (float8) have few kernels; float32 holds each of their values exactly.
    return t.float() if t.dtype.is_floating_point and t.element_size() == 1 else t


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return compare(a, b) is None


def _changed(after: torch.Tensor, before: torch.Tensor) -> torch.Tensor:
    """Elementwise: True where ``after`` differs from ``before`` (NaN equals NaN)."""
    a, b = _comparable(after).cpu(), _comparable(before).cpu()
    if a.is_complex():
        return _changed(torch.view_as_real(a), torch.view_as_real(b)).any(-1)
    differ = a != b
    if a.dtype.is_floating_point:
        differ &= ~(a.isnan() & b.isnan())
    return differ


def fill_values(dtype: torch.dtype) -> tuple[Any, Any]:
    """Two values every element of ``dtype`` can hold and an op is unlikely to write: the
    declared-writes check fills outputs with each and sees which elements changed."""
    if dtype == torch.bool:
        return False, True
    if dtype.is_complex:
        return -7777 - 7777j, 7777 + 7777j
    if dtype.is_floating_point:
        big = min(7777.0, torch.finfo(dtype).max / 2)  # float8 e4m3fn holds at most 448
        return -big, big
    info = torch.iinfo(dtype)
    return max(info.min, -7777) + 1, min(info.max, 7777) - 1


def _shares_storage(t: torch.Tensor, args: dict[str, torch.Tensor]) -> bool:
    ptr = t.untyped_storage().data_ptr()
    return any(a.untyped_storage().data_ptr() == ptr for a in args.values())


def _mask(
    spec: BreakOpSpec, name: str, args: dict[str, torch.Tensor], params: dict[str, Any]
) -> torch.Tensor | None:
    """Where a call may write ``name`` (None: anywhere), as a bool tensor of its shape."""
    if spec.partial.get(name) is None:
        return None
    mask = spec.partial[name](**args, **params)  # type: ignore[misc]
    return torch.as_tensor(mask).to(torch.bool).cpu().expand(args[name].shape)


def _first_index(where: torch.Tensor) -> tuple[int, ...]:
    return tuple(where.nonzero()[0].tolist())


Check = Callable[[LoadedSpec, Case, str], "Finding | None"]


def check_declared_writes(loaded: LoadedSpec, case: Case, device: str) -> Finding | None:
    """Writes exactly the declared arguments (the partial ones within their masks), and
    returns what it declares."""
    spec = loaded.spec
    untouched = {n for n in spec.writes if n not in spec.partial}
    results: list[dict[str, torch.Tensor]] = []
    written: list[dict[str, torch.Tensor]] = []
    for pick in (0, 1):
        # Each fill's call on a freshly imported op: state one call leaves for the other is
        # the state checks' to name, not a read of the previous contents.
        op = _fresh_spec(loaded) or spec
        args = materialize(spec, case, case.seed, device)
        for name in spec.writes:
            args[name].fill_(fill_values(args[name].dtype)[pick])
        masks = {n: _mask(spec, n, args, case.params) for n in spec.partial}
        before = {n: t.clone() for n, t in args.items()}
        result = op.call(*args.values(), **case.params)
        for name in spec.args:
            if name not in spec.written and not _same(args[name], before[name]):
                return broken(
                    "declared writes",
                    f"it writes argument {name!r}, which its spec declares read-only (in neither "
                    f"writes= nor inout=): graph segments after the break then read the "
                    f"modified {name!r}, and everything trusting the spec (this harness, a "
                    f"caller reusing the buffer) expects it unchanged. Declare it in inout= "
                    f"if the op reads and updates it, or compute into a copy.",
                )
        for name, mask in masks.items():
            if mask is None:
                continue
            outside = _changed(args[name], before[name]) & ~mask
            if bool(outside.any()):
                return broken(
                    "masked writes",
                    f"it writes {name!r} outside the elements its partial= mask allows: "
                    f"{int(outside.sum())} element(s), first at index {_first_index(outside)} "
                    f"({_describe(case)}). Graph segments after the break read those "
                    f"elements, which the op must leave as they were (e.g. padding slots -1 "
                    f"write nothing; a negative index writes the last row).",
                )
        untouched = {n for n in untouched if _same(args[n], before[n])}
        results.append({n: args[n].clone() for n in spec.writes})
        written.append({n: _changed(args[n], before[n]) for n in spec.writes})
    reads = _reads_previous(spec, results, written, case)
    if reads is not None:
        return reads
    for name in sorted(untouched):
        if isinstance(result, torch.Tensor) and not _shares_storage(result, args):
            return broken(
                "declared writes",
                f"it returns a fresh tensor instead of writing its declared output {name!r} "
                f"in place ({name!r} is left untouched): graph segments after the break read "
                f"{name!r}, which the call never writes. Write the result into {name!r} "
                f"(e.g. {name}.copy_(result)) and return None.",
            )
        return broken(
            "declared writes",
            f"it never writes its declared output {name!r}; write it on every call, or "
            f"declare in partial= which elements a call may leave unwritten.",
            tentative=True,
        )
    return _return_problem(spec, args, result, case)


def _beyond(a: torch.Tensor, b: torch.Tensor, spec: BreakOpSpec) -> torch.Tensor:
    """Elementwise: True where ``a`` and ``b`` differ by more than the spec's tolerance."""
    differ = _changed(a, b)
    if (spec.rtol or spec.atol) and a.dtype.is_floating_point:
        close = torch.isclose(a.cpu().double(), b.cpu().double(), spec.rtol, spec.atol)
        differ &= ~close
    return differ


def _reads_previous(
    spec: BreakOpSpec,
    results: list[dict[str, torch.Tensor]],
    written: list[dict[str, torch.Tensor]],
    case: Case,
) -> Finding | None:
    """A write-only output whose result depends on what it held before the call: the same
    call on the same inputs, after the two fills, leaves different values where it wrote."""
    for name in spec.writes:
        differ = _beyond(results[0][name], results[1][name], spec)
        if name in spec.partial:
            differ &= written[0][name] & written[1][name]  # unwritten elements keep the fill
        elif not bool((written[0][name] | written[1][name]).any()):
            continue  # written nowhere: the never-writes finding says more
        if bool(differ.any()):
            low, high = fill_values(results[0][name].dtype)
            return broken(
                "declared writes",
                f"it reads its previous contents: {name!r} is declared write-only (writes=), "
                f"but the same call on the same inputs leaves different values in it when it "
                f"held {low} before than when it held {high} ({int(differ.sum())} element(s), "
                f"first at index {_first_index(differ)}; {_describe(case)}). A replay hands the "
                f"op whatever the buffer last held. {_partial_advice(name, differ, written)}",
            )
    return None


def _partial_advice(name: str, differ: torch.Tensor, written: list[dict[str, torch.Tensor]]) -> str:
    """What to declare for an output whose old contents survive a call: where they survive
    only in elements the call did not write, the op may write part of it by design."""
    wrote = written[0][name] | written[1][name]
    if bool((differ & wrote).any()):
        # Values it wrote depend on what the buffer held: it reads them.
        return (
            f"Declare {name!r} in inout= if the op updates it on purpose (read-modify-write), "
            f"or overwrite every element on every call."
        )
    return (
        f"The elements it wrote are the same both times: it keeps the old contents where it "
        f"does not write. If the op writes only part of {name!r} by design (the slots or rows "
        f"it is given), declare partial={{{name!r}: mask}}, a function of the call's arguments "
        f"returning True where a call may write (examples/paged_kv_cache.py masks its caches "
        f"by slot); and where the op or the code after it reads the old contents (a cache, a "
        f"flag set and never cleared), declare {name!r} in inout= instead of writes=, with "
        f"partial= as well. Otherwise overwrite every element on every call."
    )


def _index_args(spec: BreakOpSpec, case: Case) -> list[tuple[str, TensorArg, torch.dtype]]:
    """The integer arguments with both bounds: indices, which an op may read through."""
    return [
        (name, arg, meta.dtype)
        for (name, arg), meta in zip(spec.args.items(), case.metas)
        if arg.low is not None
        and arg.high is not None
        and not meta.dtype.is_floating_point
        and meta.dtype != torch.bool
    ]


def _call_with(
    spec: BreakOpSpec, case: Case, device: str, name: str, value: torch.Tensor
) -> BaseException | None:
    args = materialize(spec, case, case.seed, device)
    args[name] = value.to(device=device, dtype=args[name].dtype)
    try:
        spec.call(*args.values(), **case.params)
    except Exception as error:
        return error
    return None


def _counting(shape: tuple[int, ...], start: int, step: int, low: int, high: int) -> torch.Tensor:
    """Values from ``start`` by ``step``, distinct while [low, high] has room, then cycling."""
    span = high - low + 1
    offsets = (start - low + step * torch.arange(max(1, math.prod(shape)))).remainder(span)
    return (low + offsets).reshape(shape)


def check_index_bounds(loaded: LoadedSpec, case: Case, device: str) -> Finding | None:
    """Runs when each index argument holds its declared bounds, the values the spec allows
    that random draws reach least often (the other elements distinct, counting away)."""
    spec = loaded.spec
    for name, arg, _ in _index_args(spec, case):
        shape = tuple(case.metas[list(spec.args).index(name)].shape)
        low = int(resolve_bound(arg.low, case.binding))  # type: ignore[arg-type]
        high = int(resolve_bound(arg.high, case.binding))  # type: ignore[arg-type]
        for label, bound, value, step in (("high", arg.high, high, -1), ("low", arg.low, low, 1)):
            held = _counting(shape, value, step, low, high)
            error = _call_with(spec, case, device, name, held)
            if error is not None:
                if _passes_fresh(loaded, case, device, name, held):
                    return _state_finding(loaded, case, error)
                return broken(
                    "index bounds",
                    f"it fails when {name!r} holds its declared bound {label}={bound!r} = "
                    f"{value} ({_describe(case)}): {_first_line(error)}. The spec allows that "
                    f"value: read within the bounds, or declare the bound the op needs.",
                    raised=True,
                )
    return None


def check_duplicate_indices(loaded: LoadedSpec, case: Case, device: str) -> Finding | None:
    """Runs when an index argument not declared unique repeats a value."""
    spec = loaded.spec
    for name, arg, _ in _index_args(spec, case):
        shape = tuple(case.metas[list(spec.args).index(name)].shape)
        if arg.unique or math.prod(shape) < 2:
            continue
        low = int(resolve_bound(arg.low, case.binding))  # type: ignore[arg-type]
        high = int(resolve_bound(arg.high, case.binding))  # type: ignore[arg-type]
        distinct = _counting(shape, low, 1, low, high)
        if _call_with(spec, case, device, name, distinct) is not None:
            continue  # fails on these values without repeats: not this part's finding
        # Every element the first one's value, which the op just handled.
        repeated = distinct.flatten()[0].expand(shape).clone()
        error = _call_with(spec, case, device, name, repeated)
        if error is not None:
            if _passes_fresh(loaded, case, device, name, repeated):
                return _state_finding(loaded, case, error)
            return broken(
                "unique indices",
                f"it fails when {name!r} repeats a value ({low} in every element), which its "
                f"spec allows ({_describe(case)}): {_first_line(error)}. If the op needs "
                f"distinct values (slots, a permutation), declare "
                f"TensorArg(..., unique=True); otherwise handle repeats.",
                raised=True,
            )
    return None


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def _return_problem(
    spec: BreakOpSpec, args: dict[str, torch.Tensor], result: Any, case: Case
) -> Finding | None:
    if isinstance(spec.returns, str):
        wanted = args[spec.returns]
        if not isinstance(result, torch.Tensor) or result.data_ptr() != wanted.data_ptr():
            return broken(
                "declared return",
                f"it declares returns={spec.returns!r} but returned {type(result).__name__}, "
                f"not that argument.",
            )
    elif spec.returns is not None and not isinstance(result, torch.Tensor):
        return broken(
            "declared return",
            f"it declares a returned tensor but returned {type(result).__name__}.",
        )
    elif isinstance(spec.returns, TensorArg) and isinstance(result, torch.Tensor):
        address = result.untyped_storage().data_ptr()
        shared = [
            n for n, t in args.items() if address and t.untyped_storage().data_ptr() == address
        ]
        if shared:
            name = shared[0]
            return broken(
                "declared return",
                f"it returns argument {name!r} itself (or a view of it) though its spec "
                f"declares a new tensor (returns=TensorArg(...)) ({_describe(case)}). A "
                f"capture library copies a break's result at replay into the memory it had "
                f"at capture, so a break that returns an argument on some calls and a new "
                f"tensor on others is refused at replay. Return a new tensor every time "
                f"({name}.clone() when there is nothing to do), or return {name!r} every time "
                f"and declare returns={name!r} with it in writes= or inout=.",
            )
    return None


def _fresh_spec(loaded: LoadedSpec) -> BreakOpSpec | None:
    """The spec from a fresh execution of its module (fresh module state), if it re-imports."""
    try:
        found = importlib.util.find_spec(loaded.module)
        if found is None or found.loader is None:
            return None
        module = importlib.util.module_from_spec(found)
        found.loader.exec_module(module)
        fresh = getattr(module, loaded.attr)
    except Exception:
        return None
    return fresh if isinstance(fresh, BreakOpSpec) else None


def _first_call(
    spec: BreakOpSpec, reference: BreakOpSpec, values: dict[str, torch.Tensor], params: Any
) -> list[torch.Tensor]:
    """What later code reads after ``reference`` (the op freshly imported, whose first call
    this is) runs on copies of ``values``."""
    clean = {n: t.clone() for n, t in values.items()}
    return _outputs(spec, clean, reference.call(*clean.values(), **params))


# The calls :func:`diagnose` has made so far, per op it checks: a crash that the same call on
# a freshly imported op does not show is named with the sizes of the calls that led to it.
_CALLED: dict[int, list[Case]] = {}


def _passes_fresh(
    loaded: LoadedSpec,
    case: Case,
    device: str,
    name: str | None = None,
    value: torch.Tensor | None = None,
) -> bool:
    """Whether the call of ``case`` (``name`` holding ``value``, if given) passes on the op
    freshly imported: its first call ever, so no earlier call left it any state."""
    fresh = _fresh_spec(loaded)
    if fresh is None:
        return False
    if name is None or value is None:
        args = materialize(fresh, case, case.seed, device)
        try:
            fresh.call(*args.values(), **case.params)
        except Exception:
            return False
        return True
    return _call_with(fresh, case, device, name, value) is None


def _earlier(loaded: LoadedSpec, case: Case) -> tuple[Case, ...]:
    """The calls diagnose made before ``case`` on the same op, one per size, in order."""
    earlier: list[Case] = []
    for called in _CALLED.get(id(loaded.spec), []):
        if called is case:
            break
        if all(called.binding != e.binding for e in earlier):
            earlier.append(dataclasses.replace(called, after=()))
    return tuple(earlier)


def _state_finding(
    loaded: LoadedSpec, case: Case, error: BaseException, after: tuple[Case, ...] | None = None
) -> Finding:
    """A call that raised where the same call on a freshly imported op passes: the op's state
    from earlier calls, named with the call sequence (kept in the case, for the reproducer)."""
    after = _earlier(loaded, case) if after is None else after
    sequence = ", then ".join(f"({_describe(c)})" for c in (*after, case))
    return broken(
        "no state across calls",
        f"called at {sequence} on one imported op, the last call raised {_first_line(error)}, "
        f"and the same call passes on a freshly imported op: it is not the arguments' values "
        f"or bounds but state an earlier call left (offsets, a workspace or a shape built once "
        f"at the first call's sizes and sliced afterwards). An engine's first call is the "
        f"capture, at one size of many: rebuild such state when the sizes change, key it by "
        f"every size it depends on, or pass it in.",
        case=dataclasses.replace(case, after=after),
    )


def _sequence_problem(loaded: LoadedSpec, case: Case, device: str) -> Finding | None:
    """``case.after``'s calls, then ``case``'s, on one freshly imported op: the last raising
    where it passes on a freshly imported op alone is state across calls."""
    spec = _fresh_spec(loaded) or loaded.spec
    for earlier in case.after:
        args = materialize(spec, earlier, earlier.seed, device)
        with contextlib.suppress(Exception):
            spec.call(*args.values(), **earlier.params)
    args = materialize(spec, case, case.seed, device)
    try:
        spec.call(*args.values(), **case.params)
    except Exception as error:
        if _passes_fresh(loaded, case, device):
            return _state_finding(loaded, case, error, case.after)
    return None


def _tensor_state(module_globals: dict[str, Any]) -> int:
    """How many tensors module-level state holds, looking into containers and objects."""
    count = 0
    for value in list(module_globals.values()):
        inner = (
            list(value.values())
            if isinstance(value, dict)
            else list(value)
            if isinstance(value, list | tuple | set)
            else list(vars(value).values())
            if hasattr(value, "__dict__") and not isinstance(value, type)
            else [value]
        )
        count += sum(isinstance(v, torch.Tensor) for v in inner)
    return count


def _write_as_replay(buffers: dict[str, torch.Tensor], values: dict[str, torch.Tensor]) -> None:
    """New values into the same buffers as a graph replay writes them: by kernels the
    autograd version counter never sees (``tensor._version`` stays where it was)."""
    for name, value in values.items():
        buffers[name].data.copy_(value)


def _long_lived(
    spec: BreakOpSpec, case: Case, device: str, new: dict[str, torch.Tensor], *, replay: bool
) -> list[torch.Tensor]:
    """A call on the case's values, then a call on ``new`` written into the same buffers
    (as a replay writes them, or as eager code does with ``copy_``): what the second leaves."""
    buffers = materialize(spec, case, case.seed, device)
    spec.call(*buffers.values(), **case.params)
    if replay:
        _write_as_replay(buffers, new)
    else:
        for name, value in new.items():
            buffers[name].copy_(value)
    return _outputs(spec, buffers, spec.call(*buffers.values(), **case.params))


def _agree(a: list[torch.Tensor], b: list[torch.Tensor], tol: Tolerance) -> bool:
    return all(compare(x, y, tol) is None for x, y in zip(a, b))


# How many calls on the same values a count of calls kept in the module gets to show.
REPEATS = 8


def _repeated_call(loaded: LoadedSpec, case: Case, device: str, tol: Tolerance) -> Finding | None:
    """The same call up to :data:`REPEATS` times on a freshly imported op, each on new copies
    of the same values: a later call that differs counts its calls (a step in the module)."""
    fresh = _fresh_spec(loaded)
    if fresh is None:
        return None
    results = []
    for _ in range(REPEATS):
        args = materialize(fresh, case, case.seed, device)
        results.append(_outputs(fresh, args, fresh.call(*args.values(), **case.params)))
        if not _agree(results[0], results[-1], tol):
            break
    else:
        return None
    count = len(results)
    return broken(
        "no state across calls",
        f"called {count} times on the same values in new buffers ({_describe(case)}), it "
        f"returns other values at call {count} than at the first: its result depends on "
        f"how many calls came before (a count or step kept in module state). A replay does "
        f"not repeat the capture's call "
        f"count: the call at capture advances the count once, and every replay runs the op "
        f"again on the engine's own schedule. Pass the count in as an argument the caller "
        f"updates (in inout=), or derive it from the inputs.",
    )


def _fresh_op_problem(
    loaded: LoadedSpec, case: Case, device: str, new: dict[str, torch.Tensor], tol: Tolerance
) -> Finding | None:
    """The long-lived op's stale answer, retried on freshly imported ops: wrong after the
    case's own call alone, and right on the same values written with ``copy_``, it keys a
    cache on the tensors' version counters; right after the case's own call alone, an
    earlier call of other sizes or dtypes left the state (:func:`_breaking_earlier_call`)."""
    reference = _fresh_spec(loaded)
    if reference is None:
        return None
    first = _first_call(reference, reference, new, case.params)

    def stale(op: BreakOpSpec, replay: bool = True) -> bool:
        return not _agree(_long_lived(op, case, device, new, replay=replay), first, tol)

    replayed, copied = _fresh_spec(loaded), _fresh_spec(loaded)
    if replayed is None or copied is None:
        return None
    if not stale(replayed):
        return _breaking_earlier_call(loaded, case, device, stale)
    if stale(copied, replay=False):
        return None
    return broken(
        "no state across calls",
        f"it returns stale values when new inputs reach the same buffers the way a graph "
        f"replay writes them ({_describe(case)}), and the right values when they are written "
        f"with copy_(): it keeps host state keyed on the tensors' version counter "
        f"(tensor._version) or identity. Kernels replayed by a CUDA graph write memory "
        f"without bumping any version counter, so every replay sees the capture's cached "
        f"values. Read the host values afresh on every call (or key the cache by the "
        f"values themselves).",
    )


def _differences(spec: BreakOpSpec, earlier: Case, case: Case) -> str:
    """How ``earlier``'s call differs from ``case``'s: its dtypes if any differ, else its
    sizes."""

    def name(dtype: torch.dtype) -> str:
        return str(dtype).removeprefix("torch.")

    dtypes = [
        f"{arg!r} {name(then.dtype)} where it is now {name(now.dtype)}"
        for arg, then, now in zip(spec.args, earlier.metas, case.metas)
        if then.dtype != now.dtype
    ]
    sizes = [
        f"{dim}={earlier.binding[dim]} where it is now {value}"
        for dim, value in case.binding.items()
        if earlier.binding.get(dim) != value
    ]
    return "; ".join(dtypes or sizes) or "the same sizes and dtypes"


def _earlier_calls_made(loaded: LoadedSpec, case: Case) -> list[Case]:
    """The calls made before ``case`` whose state may break it: each earlier drawn call and
    the smaller sizes the capture-set check called it at, other than ``case``'s own."""
    made: list[Case] = []
    for earlier in _earlier(loaded, case):
        for dim in ("", *sorted(_leading_dims(loaded.spec))):
            for size in _sizes(loaded.spec, earlier, dim) if dim else [earlier]:
                key = (size.binding, size.metas)
                if key != (case.binding, case.metas) and all(
                    key != (m.binding, m.metas) for m in made
                ):
                    made.append(size)
    return made


def _breaking_earlier_call(
    loaded: LoadedSpec, case: Case, device: str, wrong: Callable[[BreakOpSpec], bool]
) -> Finding | None:
    """The first earlier call (:func:`_earlier_calls_made`) after which a freshly imported op
    goes ``wrong`` on ``case``, named with what differs in it: state kept by a key that
    leaves that out."""
    for earlier in _earlier_calls_made(loaded, case):
        op = _fresh_spec(loaded)
        if op is None:
            return None
        args = materialize(op, earlier, earlier.seed, device)
        with contextlib.suppress(Exception):
            op.call(*args.values(), **earlier.params)
        if wrong(op):
            return _earlier_call_finding(loaded, earlier, case)
    return None


def _earlier_call_finding(loaded: LoadedSpec, earlier: Case, case: Case) -> Finding:
    """State one call of other sizes or dtypes left, which breaks ``case``'s call."""
    dtypes_differ = any(a.dtype != b.dtype for a, b in zip(earlier.metas, case.metas))
    key = "the dtype" if dtypes_differ else "every size"
    return broken(
        "no state across calls",
        f"after one call that differed in {_differences(loaded.spec, earlier, case)} "
        f"({_describe(earlier)}), the op returns other values for {_describe(case)} "
        f"than a freshly imported op does: it reuses state the earlier call "
        f"built (a scratch buffer, a table, a workspace) under a key that leaves out "
        f"{key}. An engine calls one op at every captured size and dtype. Key such state "
        f"by everything it depends on, or allocate it per call.",
        case=dataclasses.replace(case, after=(earlier,)),
    )


def check_earlier_calls(loaded: LoadedSpec, case: Case, device: str) -> Finding | None:
    """Gives the same result on new values as a first call would, whatever ran before (the
    calls ``case.after`` names, when it names any). New values reach the op's buffers as a
    graph replay writes them: no version counter moves."""
    spec = loaded.spec
    if case.after:
        found = _sequence_problem(loaded, case, device)
        if found is not None:
            return found
    fresh = _fresh_spec(loaded)
    tol = Tolerance(spec.rtol, spec.atol)
    # The long-lived op: a call on A, then new values B written into the same buffers.
    new = materialize(spec, case, case.seed + 1, device)
    used = _long_lived(spec, case, device, new, replay=True)
    # The reference: the first call ever of a freshly imported op, on B in new buffers.
    reference_spec = fresh or spec
    module_globals = getattr(reference_spec.raw_fn, "__globals__", {})
    tensors_before = _tensor_state(module_globals)
    first = _first_call(spec, reference_spec, new, case.params)
    stashed = _tensor_state(module_globals) > tensors_before
    if _agree(used, first, tol):
        return None
    found = _repeated_call(loaded, case, device, tol) or _fresh_op_problem(
        loaded, case, device, new, tol
    )
    if found is not None:
        return found
    if stashed:
        return broken(
            "no state across calls",
            "it stashes a tensor in module state on its first call (at capture, in a "
            "graph) and reads it on later calls, so a replay sees what the capture-time "
            "call left there instead of the new inputs. Keep tensors the op needs across "
            "calls in buffers the caller passes (declared in inout=), refreshed every call.",
        )
    return broken(
        "no state across calls",
        "on new values in the same buffers it returns what an earlier call computed: it "
        "freezes a host value (a .tolist()/.item() result, a length, a shape) from its first "
        "call, which is the capture, so every replay reuses capture-time values "
        "(sglang#38943). Read host values from the inputs on every call.",
    )


def check_deterministic(loaded: LoadedSpec, case: Case, device: str) -> Finding | None:
    """Two first calls on the same values, each of a freshly imported op with torch's
    generator seeded alike, leave the same values (floats within a loose tolerance, for
    atomics' rounding)."""
    ops = [_fresh_spec(loaded), _fresh_spec(loaded)]
    results = []
    for op in ops:
        if op is None:
            return None
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(case.seed)
            args = materialize(op, case, case.seed, device)
            results.append(_outputs(op, args, op.call(*args.values(), **case.params)))
    spec = loaded.spec
    loose = Tolerance(max(spec.rtol, 1e-3), max(spec.atol, 1e-3))
    for name, a, b in zip((*(repr(w) for w in spec.written), "its result"), *results):
        differ = compare(a, b, loose)
        if differ is not None:
            return broken(
                NONDETERMINISTIC,
                f"two first calls on the same values ({_describe(case)}) leave different "
                f"values in {name} ({differ}): it is "
                f"not deterministic (an unseeded shuffle or random draw, a set's order, "
                f"the order threads reach an atomic counter). An eager break runs again at "
                f"every replay and gets yet another answer than the eager run it should "
                f"equal, and no check can tell its other faults from the noise. Make it "
                f"deterministic (a stable order, a generator the caller seeds).",
            )
    return None


def _leading_dims(spec: BreakOpSpec) -> set[str]:
    """The dims that size some argument's first dimension: the batch-like ones an engine's
    capture set varies, slicing ``[:n]`` of buffers made for the largest size."""
    return {
        name
        for arg in spec.args.values()
        if arg.shape and isinstance(arg.shape[0], str)
        for name in dim_names(arg.shape[0])
        if name in spec.dims
    }


def _sizes(spec: BreakOpSpec, case: Case, dim: str) -> list[Case]:
    """``case``, then the same call with ``dim`` halved, then at its least: an engine's
    capture set of batch sizes, largest first (a size equal to an earlier one left out)."""
    found: list[Case] = []
    least = spec.dims[dim][0]
    for value in (case.binding[dim], max(least, case.binding[dim] // 2), least):
        binding = {**case.binding, dim: value}
        if any(binding == other.binding for other in found):
            continue
        metas = tuple(
            dataclasses.replace(meta, shape=resolve_shape(arg, binding))
            for arg, meta in zip(spec.args.values(), case.metas)
        )
        found.append(Case(binding, metas, case.params, case.seed))
    return found


def _static_views(
    top: dict[str, torch.Tensor], size: Case, spec: BreakOpSpec, device: str
) -> dict[str, torch.Tensor]:
    """A size's arguments as an engine's capture set holds them: the largest size's buffer
    where the shape is the same, its first rows (at the same address) where only the first
    dimension is smaller, else a buffer of the size's own."""
    views = {}
    for (name, buffer), meta in zip(top.items(), size.metas):
        if tuple(buffer.shape) == meta.shape:
            views[name] = buffer
        elif tuple(buffer.shape[1:]) == meta.shape[1:] and meta.shape[0] <= buffer.shape[0]:
            views[name] = buffer[: meta.shape[0]]
        else:
            views[name] = torch.empty(meta.shape, dtype=meta.dtype, device=device)
    return views


def check_sizes_in_one_pool(loaded: LoadedSpec, case: Case, device: str) -> Finding | None:
    """Called as an engine's capture set calls a break: for each dim that leads an argument's
    shape (a batch-like one), at the case's size and smaller ones (that dim halved, then at
    its least), each size on the first rows of buffers made for the largest, captured largest
    first, then replayed smallest first and the largest again, each replay on new values;
    every replay must give what a first call gives."""
    for dim in sorted(_leading_dims(loaded.spec)):
        sizes = _sizes(loaded.spec, case, dim)
        if len(sizes) > 1:
            found = _sizes_problem(loaded, sizes, device)
            if found is not None:
                return found
    return None


def _sizes_mismatch(
    loaded: LoadedSpec, spec: BreakOpSpec, sizes: list[Case], device: str
) -> tuple[list[int], int, int] | None:
    """``spec`` called at ``sizes`` (largest first) as a capture set calls a break: the
    replay order, and the number and size index of the first replay that differs from a
    first call on the same values."""
    case = sizes[0]
    tol = Tolerance(spec.rtol, spec.atol)
    top = materialize(spec, sizes[0], case.seed, device)
    views = [_static_views(top, size, spec, device) for size in sizes]

    def call(index: int, seed: int) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
        values = materialize(spec, sizes[index], seed, device)
        for name, value in values.items():
            views[index][name].copy_(value)
        args = views[index]
        return _outputs(spec, args, spec.call(*args.values(), **case.params)), values

    for index in range(len(sizes)):  # the capture of each size
        call(index, case.seed + index)
    order = [*reversed(range(len(sizes))), 0]
    for number, index in enumerate(order):
        used, values = call(index, case.seed + 100 + number)
        # The reference: the first call ever of a freshly imported op, on the same values.
        first = _first_call(spec, _fresh_spec(loaded) or spec, values, case.params)
        if not _agree(used, first, tol):
            return order, number, index
    return None


def _sizes_problem(loaded: LoadedSpec, sizes: list[Case], device: str) -> Finding | None:
    """The op called at ``sizes`` (largest first) as a capture set calls a break; where a
    freshly imported op passes the same, the earlier call whose state breaks it is named."""
    found = _sizes_mismatch(loaded, loaded.spec, sizes, device)
    if found is None:
        return None
    fresh = _fresh_spec(loaded)
    if fresh is not None and _sizes_mismatch(loaded, fresh, sizes, device) is None:
        left = _breaking_earlier_call(
            loaded,
            sizes[0],
            device,
            lambda op: _sizes_mismatch(loaded, op, sizes, device) is not None,
        )
        if left is not None:
            return left
    order, number, index = found
    described = " > ".join(f"({_describe(size)})" for size in sizes)
    return broken(
        "sizes in one pool",
        f"called at sizes {described}, as an engine's capture set calls a break (each "
        f"size on the first rows of buffers made for the largest, captured largest first, "
        f"then replayed in order {order}), replay {number} at ({_describe(sizes[index])}) "
        "gave other values than a first call on the same inputs: the op keeps state "
        "across calls (a workspace, a cached view or index, a per-shape cache) that one "
        "size leaves for another. Key such state by every size it depends on and by "
        "nothing that sizes share (a buffer's address), or pass it in.",
    )


def lay_out(value: torch.Tensor, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``value``'s contents in ``layout`` (one of :data:`LAYOUTS`): the view an op is given,
    and the buffer it views, which holds a fill value outside the view."""
    shape, dim = tuple(value.shape), value.dim()

    def buffer(*size: int) -> torch.Tensor:
        empty = torch.empty(size, dtype=value.dtype, device=value.device)
        return empty.fill_(fill_values(value.dtype)[0])

    if layout == "column slice" and dim == 1:
        base = buffer(2 * shape[0] + 1)
        view = base[1::2]
    elif layout == "column slice" and dim >= 2:
        # Each row (all dims but the first) is the middle third of a row three times as
        # long, as q of shape (tokens, heads, head_size) is a view of qkv[:, hidden:2*hidden].
        width = math.prod(shape[1:])
        base = buffer(shape[0], 3 * width)
        view = base[:, width : 2 * width].unflatten(1, shape[1:])
    elif layout == "transposed" and dim >= 2:
        base = buffer(*shape[:-2], shape[-1], shape[-2])
        view = base.transpose(-1, -2)
    elif layout == "offset":
        base = buffer(value.numel() + 3)
        view = base[3:].view(shape)
    else:
        base = value.clone()
        view = base
    view.copy_(value)
    return view, base


def _outside(view: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
    """A bool tensor of ``base``'s shape, True outside the elements ``view`` covers."""
    marker = torch.ones(base.shape, dtype=torch.bool)
    marker.as_strided(view.shape, view.stride(), view.storage_offset()).fill_(False)
    return marker


def _laid_out_call(
    loaded: LoadedSpec, values: dict[str, torch.Tensor], case: Case, layouts: dict[str, str]
) -> tuple[list[torch.Tensor], dict[str, int]] | BaseException:
    """The op, freshly imported, called on ``values`` with the arguments named in ``layouts``
    laid out so (the others contiguous): what later code reads after it, and per argument
    how many elements of its buffer outside the view it changed; or what it raised."""
    spec = _fresh_spec(loaded) or loaded.spec
    laid = {n: lay_out(v, layouts.get(n, CONTIGUOUS)) for n, v in values.items()}
    args = {n: view for n, (view, _) in laid.items()}
    before = {n: base.clone() for n, (_, base) in laid.items()}
    try:
        result = spec.call(*args.values(), **case.params)
    except Exception as error:
        return error
    outside = {
        n: int((_changed(base, before[n]) & _outside(view, base)).sum())
        for n, (view, base) in laid.items()
        if view is not base
    }
    return _outputs(loaded.spec, args, result), outside


def _layout_problem(
    loaded: LoadedSpec,
    values: dict[str, torch.Tensor],
    case: Case,
    layouts: dict[str, str],
    reference: list[torch.Tensor],
) -> str | None:
    """What the op does differently with the arguments laid out as ``layouts`` say than on
    contiguous copies (``reference``), in words, or None."""
    spec = loaded.spec
    done = _laid_out_call(loaded, values, case, layouts)
    if isinstance(done, BaseException):
        return f"it raises {_first_line(done)}"
    outputs, outside = done
    for name, count in outside.items():
        if count:
            return f"it writes {count} element(s) of the buffer {name!r} views, outside the view"
    names = [*(repr(n) for n in spec.written), "the tensor it returns"]
    for name, got, want in zip(names, outputs, reference):
        problem = compare(*_rounded(got, want, spec))
        if problem is not None:
            return f"it leaves {name} different ({problem})"
    return None


# How many units in the last place a kernel's other summation order on a strided view may
# move a float result (a GPU reduces a transposed view in another order than a contiguous
# one); work lost on a view differs by far more.
ROUNDING_ULPS = 16


def _rounded(
    got: torch.Tensor, want: torch.Tensor, spec: BreakOpSpec
) -> tuple[torch.Tensor, torch.Tensor, Tolerance]:
    """``got`` and ``want`` with the tolerance a layout comparison allows: the spec's, widened
    to :data:`ROUNDING_ULPS` of the dtype for floats (one-byte floats compared as float32,
    where one rounding step of the input can move the result one step of theirs)."""
    if not want.dtype.is_floating_point:
        return got, want, Tolerance(spec.rtol, spec.atol)
    ulp = torch.finfo(want.dtype).eps
    if want.element_size() == 1:
        got, want = got.float(), want.float()
    ulps = ulp * (ROUNDING_ULPS if ulp < 1e-2 else 2)
    return got, want, Tolerance(max(spec.rtol, ulps), max(spec.atol, ulps))


def check_layouts(loaded: LoadedSpec, case: Case, device: str) -> Finding | None:
    """Does on arguments laid out as the case draws them (column slices of a wider buffer, at
    a storage offset, transposed; contiguous where declared ``contiguous=True``) what it
    does on contiguous copies of the same values."""
    spec = loaded.spec
    layouts = dict(zip(spec.args, case.layouts))
    strided = [n for n, lay in layouts.items() if lay != CONTIGUOUS]
    if not strided:
        return None
    values = materialize(spec, case, case.seed, device)
    reference = _laid_out_call(loaded, values, case, {})
    if isinstance(reference, BaseException):
        return None  # it fails on contiguous copies too: another part's finding
    found = _layout_problem(loaded, values, case, layouts, reference[0])
    if found is None:
        return None
    # The arguments whose layout alone shows it, when some do.
    alone = [
        n
        for n in strided
        if _layout_problem(loaded, values, case, {n: layouts[n]}, reference[0]) is not None
    ]
    culprits = alone or strided
    shown = {n: lay_out(values[n], layouts[n])[0] for n in culprits}
    where = "; ".join(
        f"{n!r} {_LAYOUT_WORDS[layouts[n]]}, strides {tuple(shown[n].stride())}, "
        f"storage offset {shown[n].storage_offset()}"
        for n in culprits
    )
    return broken(
        "layouts",
        f"with {where} ({_describe(case)}), {found}, which the op on contiguous copies of the "
        f"same values does not. Engines pass strided views: q, k and v sliced from one fused "
        f"qkv buffer, caches viewed at an offset. On such a view .reshape() and .contiguous() "
        f"return a copy, so what the op writes there is lost, and code assuming contiguous "
        f"memory (.view(), data_ptr arithmetic) touches the wrong elements. Write through "
        f"views (x.unflatten(-1, (heads, head_size)), or x.copy_(result) at the end), or "
        f"declare TensorArg(..., contiguous=True) for an argument every caller passes "
        f"contiguous.",
    )


def _stream_key(stream: Any) -> int:
    return int(stream.cuda_stream)


class _StreamWork(TorchDispatchMode):
    """Counts the tensor ops issued on each stream while it is active, and notes the first
    op on a stream other than the caller's that touches an argument (by storage) before that
    stream waited for the caller's: the race a side stream forked without a wait starts."""

    def __init__(self, caller: int, args: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.caller = caller
        self.work: dict[int, int] = {}
        self.ordered: set[int] = set()  # streams that waited for the caller's work
        self.storages = {t.untyped_storage().data_ptr(): name for name, t in args.items()}
        self.early: tuple[str, str] | None = None  # (argument, op) touched before the wait

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        key = _stream_key(torch.cuda.current_stream())
        self.work[key] = self.work.get(key, 0) + 1
        if key != self.caller and key not in self.ordered and self.early is None:
            for value in (*args, *(kwargs or {}).values()):
                if isinstance(value, torch.Tensor):
                    name = self.storages.get(value.untyped_storage().data_ptr())
                    if name is not None:
                        self.early = (name, str(func.overloadpacket.__name__))
                        break
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _patched(owner: Any, name: str, make: Callable[[Any], Any]) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, make(original))
    try:
        yield
    finally:
        setattr(owner, name, original)


def check_streams_joined(loaded: LoadedSpec, case: Case, device: str) -> Finding | None:
    """Work the op issues on another stream is ordered both ways with the caller's stream:
    that stream waits for the caller's before it touches an argument, and the caller's
    waits for all of it before the op returns."""
    spec = loaded.spec
    args = materialize(spec, case, case.seed, device)
    caller = torch.cuda.current_stream()
    audit = _StreamWork(_stream_key(caller), args)
    recorded: dict[int, tuple[int, int]] = {}
    joined: dict[int, int] = {}

    def record(original: Any) -> Any:
        def patched(event: Any, stream: Any = None) -> Any:
            where = torch.cuda.current_stream() if stream is None else stream
            key = _stream_key(where)
            recorded[id(event)] = (key, audit.work.get(key, 0))
            return original(event, stream) if stream is not None else original(event)

        return patched

    def wait(original: Any) -> Any:
        # Stream.wait_event and wait_stream both end in Event.wait, on the GPU and simulated.
        def patched(event: Any, stream: Any = None) -> Any:
            waiter = _stream_key(torch.cuda.current_stream() if stream is None else stream)
            if id(event) in recorded:
                key, count = recorded[id(event)]
                if waiter == audit.caller:
                    joined[key] = max(joined.get(key, 0), count)
                elif key == audit.caller:
                    audit.ordered.add(waiter)
            return original(event, stream) if stream is not None else original(event)

        return patched

    def synchronize(original: Any) -> Any:
        def patched(*a: Any, **k: Any) -> Any:
            joined.update(audit.work)  # the host waited for everything issued so far
            audit.ordered.update(audit.work)
            return original(*a, **k)

        return patched

    with (
        _patched(torch.cuda.Event, "record", record),
        _patched(torch.cuda.Event, "wait", wait),
        _patched(torch.cuda, "synchronize", synchronize),
        audit,
    ):
        spec.call(*args.values(), **case.params)
    if audit.early is not None:
        name, op = audit.early
        return broken(
            "streams joined",
            f"it works on {name!r} ({op}) on a side stream that never waited for the "
            f"caller's stream: a race with the caller's work. In an engine the graph "
            f"segment just before the break writes {name!r} on the caller's stream, and "
            f"the side stream may read it before that write lands (or write it while the "
            f"segment still reads it). Start the side stream's work with "
            f"side.wait_stream(torch.cuda.current_stream()).",
        )
    unjoined = {k: n for k, n in audit.work.items() if k != audit.caller and n > joined.get(k, 0)}
    if not unjoined:
        return None
    ops = sum(n - joined.get(k, 0) for k, n in unjoined.items())
    return broken(
        "streams joined",
        f"it forks a side stream and never joins it: {ops} op(s) on {len(unjoined)} other "
        f"stream(s) that the caller's stream never waits for. The next graph segment can read "
        f"their results before they are written, and inside a capture CUDA fails with "
        f"'capturing stream has unjoined work'. End with "
        f"torch.cuda.current_stream().wait_stream(side).",
    )


def check_concurrent_global_capture(loaded: LoadedSpec, case: Case, device: str) -> Finding | None:
    """Makes none of the calls that invalidate another thread's ``global``-mode capture that
    an eager break can avoid: ``torch.cuda.synchronize()`` and a cudaMalloc.

    Both are observed directly (a patched ``synchronize``, growth of reserved memory over a
    warmed-up call), not through a real concurrent capture: the H200 also invalidates a
    ``global`` capture for another stream's host read (``.item()``, ``.tolist()``), which is
    what an eager break exists to do, so a capture would flag every correct op.
    """
    spec = loaded.spec
    args = materialize(spec, case, case.seed, device)
    other = torch.cuda.Stream()
    other.wait_stream(torch.cuda.current_stream())
    synced: list[bool] = []

    def note_sync(original: Any) -> Any:
        def patched(*a: Any, **k: Any) -> Any:
            synced.append(True)
            return original(*a, **k)

        return patched

    with torch.cuda.stream(other):
        # Warm-up on the same stream and buffers: the allocator's cache then serves the
        # call below (cached blocks belong to the stream that freed them).
        spec.call(*args.values(), **case.params)
        reserved = torch.cuda.memory_reserved()
        with _patched(torch.cuda, "synchronize", note_sync):
            spec.call(*args.values(), **case.params)
        grown = torch.cuda.memory_reserved() - reserved
    torch.cuda.current_stream().wait_stream(other)
    if synced:
        what = "calls torch.cuda.synchronize()"
    elif grown > 0:
        what = f"allocates new device memory (cudaMalloc of {grown} bytes on a warmed-up call)"
    else:
        return None
    return broken(
        "concurrent capture",
        f"it {what}; while another thread captures in capture_error_mode='global', CUDA "
        f"then invalidates that capture (operation not permitted when stream is capturing). "
        f"Do not synchronize in the op, and allocate its buffers before capture (or pass "
        f"them in).",
    )


# Order matters only for reading: each check reports independently of the others, except
# that an op leaving work unjoined is judged on that alone (see RACED).
CHECKS: tuple[tuple[str, Check], ...] = (
    (NONDETERMINISTIC, check_deterministic),
    ("index bounds", check_index_bounds),
    ("unique indices", check_duplicate_indices),
    ("declared writes", check_declared_writes),
    ("layouts", check_layouts),
    ("no state across calls", check_earlier_calls),
    ("streams joined", check_streams_joined),
    ("concurrent capture", check_concurrent_global_capture),
    # Last: it calls the op a dozen times, which the checks above should not see.
    ("sizes in one pool", check_sizes_in_one_pool),
)


# The checks that judge the values an op leaves in its outputs. Those values race with work
# the op left on an unjoined stream, so on a GPU they may look wrong or stale when only the
# join is missing (the H200 showed both); the join is then the one part reported. An op
# that is not deterministic fails them all by chance; that is then the one part reported.
RACED = ("declared writes", "layouts", "no state across calls", "sizes in one pool")
PARTS = frozenset(part for part, _ in CHECKS)
# The checks that feed an index argument a value the spec allows but draws seldom.
VALUE_PARTS = ("index bounds", "unique indices")
UNJOINED = "streams joined"


def diagnose(loaded: LoadedSpec, device: str, examples: int = 5, seed: int = 0) -> list[Finding]:
    """The op's contract violations on ``examples`` drawn cases, at most one per check.

    Runs on ``device`` as given (the caller opens the GPU or the simulator).
    """
    found: dict[str, Finding] = {}
    called = _CALLED.setdefault(id(loaded.spec), [])
    called.clear()

    def tentative(part: str) -> bool:
        return bool(dict(found[part].scenario).get("tentative"))

    @hypothesis_seed(seed)
    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate],
    )
    @given(cases(loaded.spec))
    def run(case: Case) -> None:
        called.append(case)
        for part, check in CHECKS:
            if part in found and not tentative(part):
                continue
            try:
                violation = check(loaded, case, device)
            except Exception as error:
                violation = _raised_finding(loaded, case, device, part, check, error)
            if violation is None:
                continue
            # A check may find another part's fault (a crash that is state across calls).
            key = violation.violation if violation.violation in PARTS else part
            if key in found and (not tentative(key) or dict(violation.scenario).get("tentative")):
                continue
            if case_of(violation) is None:
                violation = dataclasses.replace(
                    violation, scenario=(*violation.scenario, ("case", case))
                )
            found[key] = violation

    try:
        run()
    finally:
        _CALLED.pop(id(loaded.spec), None)
    if UNJOINED in found or NONDETERMINISTIC in found:
        # Work left on an unjoined stream makes the op's answers vary too.
        for part in (*RACED, *((NONDETERMINISTIC,) if UNJOINED in found else ())):
            found.pop(part, None)
    if "no state across calls" in found:
        # State one call leaves for the next at one size explains what sizes share too.
        found.pop("sizes in one pool", None)
    if any(part in found for part in VALUE_PARTS):
        # The op failing on an index value explains its failing in the other checks too.
        found = {p: v for p, v in found.items() if p in VALUE_PARTS or not _raised(v)}
    return [found[part] for part, _ in CHECKS if part in found]


def _raised_finding(
    loaded: LoadedSpec, case: Case, device: str, part: str, check: Check, error: BaseException
) -> Finding:
    """A check that raised in the op's code: state across calls where the same check passes
    on a freshly imported op, else the op failing on arguments its spec allows."""
    fresh = _fresh_spec(loaded)
    if fresh is not None:
        try:
            check(dataclasses.replace(loaded, spec=fresh), case, device)
        except Exception:
            pass
        else:
            return _state_finding(loaded, case, error)
    return broken(
        part,
        f"the op raised {_first_line(error)} on arguments its spec allows ({_describe(case)})",
        raised=True,
    )


def _describe(case: Case) -> str:
    dims = ", ".join(f"{k}={v}" for k, v in case.binding.items())
    params = ", ".join(f"{k}={v!r}" for k, v in case.params.items())
    return "; ".join(p for p in (dims, params) if p) or "no dims"


def recheck(loaded: LoadedSpec, part: str, case: Case, device: str) -> Finding | None:
    """Runs the check of ``part`` again on ``case``: what a violation's reproducer does."""
    check = dict(CHECKS)["declared writes" if part == "masked writes" else part]
    try:
        return check(loaded, case, device)
    except Exception as error:
        return broken(part, f"the op raised {_first_line(error)}", raised=True, case=case)
