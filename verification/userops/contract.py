"""Checks a user's break op against the contract its :class:`BreakOpSpec` declares.

:func:`diagnose` runs the op on its own, and beside an open capture, on inputs drawn from
the spec, and returns one :class:`~verification.findings.Finding` per part of the contract it broke, in plain
words: declared writes, dependence on earlier calls (a frozen host value or a stashed
tensor), unjoined side streams, and calls that break a concurrent ``global``-mode capture.
Every check is one entry of :data:`CHECKS`.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from verification.findings import OP_CONTRACT, Finding
from verification.ops.spec import TensorMeta
from verification.oracle import Tolerance, compare
from verification.programs import input_expr
from verification.userops.programs import draw_metas, producer
from verification.userops.spec import BreakOpSpec, LoadedSpec

# The check name of an op contract's findings; each names the broken part as its violation.
CONTRACT = "contract"


def broken(part: str, message: str) -> Finding:
    """One broken part of an op's contract; ``message`` says how, and what to do instead."""
    return Finding(OP_CONTRACT, CONTRACT, message, violation=part)


@dataclass(frozen=True)
class Case:
    """Concrete sizes, argument metas and params for one call of the op."""

    binding: dict[str, int]
    metas: tuple[TensorMeta, ...]
    params: dict[str, Any]
    seed: int


@st.composite
def cases(draw: st.DrawFn, spec: BreakOpSpec) -> Case:
    binding = {d: draw(st.integers(lo, hi)) for d, (lo, hi) in spec.dims.items()}
    metas = tuple(draw_metas(draw, spec, binding))
    params = draw(st.fixed_dictionaries(dict(spec.params)))
    return Case(binding, metas, params, draw(st.integers(0, 2**16)))


def materialize(spec: BreakOpSpec, case: Case, seed: int, device: str) -> dict[str, torch.Tensor]:
    """Argument values for ``case`` meeting the spec's value bounds (the fuzzer's producers)."""
    g = torch.Generator().manual_seed(seed)
    values = {}
    for (name, arg), meta in zip(spec.args.items(), case.metas):
        raw = eval(input_expr(meta), {"torch": torch, "g": g}).to(device)
        fit, params = producer(arg, case.binding, meta.dtype)
        values[name] = fit.run(raw, **params)  # type: ignore[misc]
    return values


def _outputs(spec: BreakOpSpec, args: dict[str, torch.Tensor], result: Any) -> list[torch.Tensor]:
    """What later code reads after a call: the written arguments, then a returned tensor."""
    outs = [args[w].clone() for w in spec.writes]
    if isinstance(result, torch.Tensor):
        outs.append(result.clone())
    return outs


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return compare(a, b) is None


def _shares_storage(t: torch.Tensor, args: dict[str, torch.Tensor]) -> bool:
    ptr = t.untyped_storage().data_ptr()
    return any(a.untyped_storage().data_ptr() == ptr for a in args.values())


Check = Callable[[LoadedSpec, Case, str], "Finding | None"]


def check_declared_writes(loaded: LoadedSpec, case: Case, device: str) -> Finding | None:
    """Writes exactly the declared arguments, and returns what it declares."""
    spec = loaded.spec
    untouched = set(spec.writes)
    for sentinel in (-7777, 7777):
        args = materialize(spec, case, case.seed, device)
        for name in spec.writes:
            args[name].fill_(sentinel > 0 if args[name].dtype == torch.bool else sentinel)
        before = {n: t.clone() for n, t in args.items()}
        result = spec.call(*args.values(), **case.params)
        for name in spec.args:
            if name not in spec.writes and not _same(args[name], before[name]):
                return broken(
                    "declared writes",
                    f"it writes argument {name!r}, which writes= does not declare; graph "
                    f"segments after the break read {name!r} as it was. Declare it in "
                    f"writes=, or compute into a copy.",
                )
        untouched = {n for n in untouched if _same(args[n], before[n])}
    for name in sorted(untouched):
        if isinstance(result, torch.Tensor) and not _shares_storage(result, args):
            return broken(
                "declared writes",
                f"it returns a fresh tensor instead of writing its declared output {name!r} "
                f"in place ({name!r} is left untouched). Graph segments after the break read "
                f"{name!r}, and vLLM's contract never refreshes a returned tensor at replay. "
                f"Write the result into {name!r} (e.g. {name}.copy_(result)) and return None.",
            )
        return broken(
            "declared writes",
            f"it never writes its declared output {name!r}; write it on every call.",
        )
    return _return_problem(spec, args, result)


def _return_problem(
    spec: BreakOpSpec, args: dict[str, torch.Tensor], result: Any
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


def check_earlier_calls(loaded: LoadedSpec, case: Case, device: str) -> Finding | None:
    """Gives the same result on new values as a first call would, whatever ran before."""
    spec = loaded.spec
    fresh = _fresh_spec(loaded)
    tol = Tolerance(spec.rtol, spec.atol)
    # The long-lived op: a call on A, then new values B copied into the same buffers.
    buffers = materialize(spec, case, case.seed, device)
    spec.call(*buffers.values(), **case.params)
    new = materialize(spec, case, case.seed + 1, device)
    for name, value in new.items():
        buffers[name].copy_(value)
    used = _outputs(spec, buffers, spec.call(*buffers.values(), **case.params))
    # The reference: the first call ever of a freshly imported op, on B in new buffers.
    reference_spec = fresh or spec
    module_globals = getattr(reference_spec.raw_fn, "__globals__", {})
    tensors_before = _tensor_state(module_globals)
    clean = {n: t.clone() for n, t in new.items()}
    first = _outputs(spec, clean, reference_spec.call(*clean.values(), **case.params))
    stashed = _tensor_state(module_globals) > tensors_before
    if all(compare(a, b, tol) is None for a, b in zip(used, first)):
        return None
    if stashed:
        return broken(
            "no state across calls",
            "it stashes a tensor in module state on its first call (at capture, in a "
            "graph) and reads it on later calls, so a replay sees what the capture-time "
            "call left there instead of the new inputs. Keep tensors the op needs across "
            "calls in buffers the caller passes (declared in writes=), refreshed every call.",
        )
    return broken(
        "no state across calls",
        "on new values in the same buffers it returns what an earlier call computed: it "
        "freezes a host value (a .tolist()/.item() result, a length, a shape) from its first "
        "call, which is the capture, so every replay reuses capture-time values "
        "(sglang#38943). Read host values from the inputs on every call.",
    )


def _stream_key(stream: Any) -> int:
    return int(stream.cuda_stream)


class _StreamWork(TorchDispatchMode):
    """Counts the tensor ops issued on each stream while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.work: dict[int, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        key = _stream_key(torch.cuda.current_stream())
        self.work[key] = self.work.get(key, 0) + 1
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
    """The caller's stream waits for all work the op issues on other streams."""
    spec = loaded.spec
    args = materialize(spec, case, case.seed, device)
    caller = torch.cuda.current_stream()
    audit = _StreamWork()
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
            waiter = torch.cuda.current_stream() if stream is None else stream
            if _stream_key(waiter) == _stream_key(caller) and id(event) in recorded:
                key, count = recorded[id(event)]
                joined[key] = max(joined.get(key, 0), count)
            return original(event, stream) if stream is not None else original(event)

        return patched

    def synchronize(original: Any) -> Any:
        def patched(*a: Any, **k: Any) -> Any:
            joined.update(audit.work)  # the host waited for everything issued so far
            return original(*a, **k)

        return patched

    with (
        _patched(torch.cuda.Event, "record", record),
        _patched(torch.cuda.Event, "wait", wait),
        _patched(torch.cuda, "synchronize", synchronize),
        audit,
    ):
        spec.call(*args.values(), **case.params)
    caller_key = _stream_key(caller)
    unjoined = {k: n for k, n in audit.work.items() if k != caller_key and n > joined.get(k, 0)}
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
    ("declared writes", check_declared_writes),
    ("no state across calls", check_earlier_calls),
    ("streams joined", check_streams_joined),
    ("concurrent capture", check_concurrent_global_capture),
)


# The checks that judge the values an op leaves in its outputs. Those values race with work
# the op left on an unjoined stream, so on a GPU they may look wrong or stale when only the
# join is missing (the H200 showed both); the join is then the one part reported.
RACED = ("declared writes", "no state across calls")
UNJOINED = "streams joined"


def diagnose(loaded: LoadedSpec, device: str, examples: int = 5, seed: int = 0) -> list[Finding]:
    """The op's contract violations on ``examples`` drawn cases, at most one per check.

    Runs on ``device`` as given (the caller opens the GPU or the simulator).
    """
    found: dict[str, Finding] = {}

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
        for part, check in CHECKS:
            if part in found:
                continue
            try:
                violation = check(loaded, case, device)
            except Exception as error:
                first = str(error).strip().splitlines()
                violation = broken(
                    part,
                    f"the op raised {type(error).__name__}: {first[0] if first else ''} "
                    f"on arguments its spec allows ({_describe(case)})",
                )
            if violation is not None:
                found[part] = violation

    run()
    if UNJOINED in found:
        for part in RACED:
            found.pop(part, None)
    return [found[part] for part, _ in CHECKS if part in found]


def _describe(case: Case) -> str:
    dims = ", ".join(f"{k}={v}" for k, v in case.binding.items())
    params = ", ".join(f"{k}={v!r}" for k, v in case.params.items())
    return "; ".join(p for p in (dims, params) if p) or "no dims"
