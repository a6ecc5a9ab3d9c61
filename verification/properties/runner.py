"""Property 7, the runner: ``BreakableGraphRunner`` captures once per input signature and
replays, with results equal to eager, and leaves the caller's tensors as eager leaves them.

Only targets whose module has a ``BreakableGraphRunner`` are checked (others are reported
not applicable). Two fixed programs (a function that writes an input and returns views of it among them), then programs drawn by
the fuzzer's generator (in-place and ``out=`` ops on their inputs, outputs that are inputs,
views of inputs or of each other), are each wrapped in a function of its inputs plus a tensor
``extra``, a number ``scale`` and a number ``shift`` with a default, and the runner is called
with repeated and new signatures (the tensors of the call before passed again, inputs at
another storage offset, the default given, another shift, scale, dtype, shape or strides of
``extra``, inputs by keyword). All other calls get fresh tensors, and eager runs the function
on an identical set. After each call the caller's tensors must equal eager's, every output
must share memory as eager's does (be the caller's input, the same view of it, the same view
of another output, or memory of its own), and the results must equal eager; a new signature
must run the function again (warm-up and capture), a repeated one must not run it at all and
must return the very objects of its first call for outputs that are not the caller's tensors;
``debug=True`` must stay silent; the caller's stream must be current after each call; every
capture must allocate in the runner's pool. With graphs disabled the same holds, and each
repeated call runs the function once. A fixed scenario checks that ``debug=True`` reports a
moved static output and that without it nothing is checked.

Another fixed scenario, run first, checks the arguments as documented: ``fn`` by position or
by keyword, options only by keyword. A new signature runs the function exactly ``warmup + 1``
times, for ``warmup=0`` (the captured run only), ``warmup=2`` and the default, which must be
at least 1 (the default the target declares in its signature; 1 where it declares none).
``warmup=-1`` must raise ValueError, ``warmup=True`` and ``warmup=1.5`` ValueError or
TypeError, a ``fn`` that is not callable or an option by position TypeError, all at
construction, with a message naming what is wrong (except Python's own for an option by
position), and leaving the caller's stream current and no capture active.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from hypothesis import strategies as st

from verification.causes import describe as describe_error
from verification.execute import BreakLog, collector_paused, run_steps, step_callables
from verification.findings import Finding
from verification.ops.spec import Decorate, TensorMeta
from verification.oracle import compare, program_tolerance
from verification.programs import (
    Program,
    Step,
    default_ops,
    make_inputs,
    op_table,
    programs,
    with_drops,
)
from verification.properties.base import (
    CheckConfig,
    CheckResult,
    Findings,
    property_finding,
    timed,
)
from verification.properties.runs import pool_of

NAME = "runner"
RUNNER = "BreakableGraphRunner"
# An example costs about six fuzz examples (eight captures): the budget is divided by this.
COST = 6
# RNG ops are left out: warm-up, capture and replay each draw, so no seed lines them up
# with one eager run.
OPS = tuple(spec for spec in default_ops() if not spec.rng)


@dataclass(frozen=True)
class Call:
    """One call of the runner: the values' seed and how the arguments are passed."""

    label: str
    seed: int
    scale: int = 2
    shift: int | None = None  # None: left to the function's default
    dtype: torch.dtype = torch.float32
    shape: tuple[int, ...] = (4,)
    strided: bool = False  # ``extra`` every other element of a wider tensor
    offset: bool = False  # the program's inputs OFFSET_BYTES into their storage
    by_keyword: bool = False
    again: bool = False  # the previous call's tensors, as it left them
    repeats: str | None = None  # the label of the earlier call with the same signature


# Graph mode: every part of a signature changes once, and the first one comes back thrice:
# with fresh tensors, with the tensors the call before wrote, and with inputs at an offset.
GRAPH_CALLS = (
    Call("first", 1),
    Call("repeat", 2, repeats="first"),
    Call("same tensors again", 2, again=True, repeats="first"),
    Call("inputs at an offset", 3, offset=True, repeats="first"),
    Call("default given", 4, shift=0),
    Call("new shift", 5, shift=1),
    Call("new scale", 6, scale=3),
    Call("new dtype", 7, dtype=torch.float64),
    Call("new shape", 8, shape=(2, 3)),
    Call("new strides", 9, strided=True),
    Call("inputs by keyword", 10, by_keyword=True),
    Call("first again", 11, repeats="first"),
)
EAGER_CALLS = (
    Call("first", 1),
    Call("repeat", 2, repeats="first"),
    Call("same tensors again", 2, again=True, repeats="first"),
    Call("new scale", 3, scale=3),
    Call("first again", 4, repeats="first"),
)


def _fixed(
    inputs: int, shape: tuple[int, ...], steps: list[Step], outputs: tuple[int, ...]
) -> Program:
    metas = tuple(TensorMeta(shape, torch.float32) for _ in range(inputs))
    return Program(metas, with_drops(steps, outputs), outputs)


# Programs checked before any drawn one, as hypothesis's explicit examples are: a small budget
# (the ``ci`` profile's few examples) may draw no program that writes its inputs.
FIXED_PROGRAMS = (
    # A function a runner must copy back from, and more: x.add_(y) (an input written), its transpose (a view of
    # an input), x * x (memory of its own), torch.add(x*x, x*x, out=y) (an out= into an
    # input), and the transpose negated in place (an input written through a view; returned
    # twice, as one object).
    _fixed(
        2,
        (4, 8),
        [
            Step("add_", (0, 1), (("alpha", 1.0),), False),
            Step("matrix_transpose", (2,), (), False),
            Step("mul", (2, 2), (), False),
            Step("add_out", (4, 4, 1), (), False),
            Step("neg_", (3,), (), False),
        ],
        (2, 3, 4, 5, 6),
    ),
    # An eager break that writes its input at capture: the first replay must not see that.
    _fixed(
        2,
        (4, 8),
        [Step("add_", (0, 1), (("alpha", 1.0),), False), Step("normalize_", (2,), (), True)],
        (3,),
    ),
)


def runner_class(config: CheckConfig) -> Any:
    return getattr(config.target.module, RUNNER, None)


def program_strategy(config: CheckConfig) -> st.SearchStrategy[Program]:
    """The fuzzer's generator, under the target's break contract, returning inputs too."""
    return programs(
        max_ops=config.max_ops,
        max_breaks=config.max_breaks,
        ops=OPS,
        contract=config.target.contract,
        outputs_may_be_inputs=True,
    )


Arguments = tuple[tuple[Any, ...], dict[str, Any]]


@dataclass(repr=False)
class Wrapped:
    """The drawn program as the function a runner wraps (the target's breaks) or as eager
    runs it (``decorate`` None: breaks are plain calls); ``calls`` counts its runs."""

    program: Program
    config: CheckConfig
    decorate: Decorate | None = None
    calls: int = 0
    table: dict[str, Any] = field(init=False)
    callables: list[Callable[..., Any]] = field(init=False)

    def __post_init__(self) -> None:
        self.table = op_table(OPS)
        decorate = self.decorate or (lambda fn: fn)
        self.callables = step_callables(self.program, self.table, decorate, BreakLog())

    def __repr__(self) -> str:
        # Errors the runner raises name it; the program's repr would bury the message.
        return f"<the drawn program of {len(self.program.steps)} steps>"

    def __call__(
        self, *args: torch.Tensor, scale: int, extra: torch.Tensor, shift: int = 0, **named: Any
    ) -> Any:
        self.calls += 1
        count = len(self.program.inputs)
        inputs = [*args, *(named[f"t{i}"] for i in range(len(args), count))]
        # The inputs themselves: the program may write them, as eager code does.
        outputs = run_steps(self.program, self.table, self.callables, inputs)
        return [*outputs, extra * scale + shift]

    def arguments(self, call: Call) -> Arguments:
        """Fresh (args, kwargs) of ``call``; equal sets on every call with the same ``call``."""
        device = self.config.device
        inputs = make_inputs(self.program, self.config.seed + call.seed, device)
        if call.offset:
            inputs = [_at_offset(x) for x in inputs]
        g = torch.Generator().manual_seed(self.config.seed + call.seed)
        extra = torch.randn(call.shape, generator=g).to(call.dtype).to(device)
        if call.strided:
            wide = torch.zeros((*call.shape[:-1], 2 * call.shape[-1]), dtype=call.dtype)
            extra = wide.to(device)[..., ::2].copy_(extra)
        kwargs: dict[str, Any] = {"scale": call.scale, "extra": extra}
        if call.shift is not None:
            kwargs["shift"] = call.shift
        if call.by_keyword:
            kwargs.update({f"t{i}": x for i, x in enumerate(inputs)})
            return (), kwargs
        return tuple(inputs), kwargs


# Bytes before an input "at an offset": as aligned as a fresh allocation, since the rounding
# of some kernels (a CPU dot product, say) depends on the alignment of their operands.
OFFSET_BYTES = 1024


def _at_offset(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``'s values OFFSET_BYTES into a storage of its own (same strides, new offset)."""
    pad = OFFSET_BYTES // tensor.element_size()
    storage = torch.empty(tensor.numel() + pad, dtype=tensor.dtype, device=tensor.device)
    return storage[pad:].view(tensor.shape).copy_(tensor)


def named_tensors(arguments: Arguments) -> list[tuple[str, torch.Tensor]]:
    args, kwargs = arguments
    named = [(f"t{i}", x) for i, x in enumerate(args)]
    return named + [(k, v) for k, v in kwargs.items() if isinstance(v, torch.Tensor)]


Relation = tuple[Any, ...]


def _shares(a: torch.Tensor, b: torch.Tensor) -> bool:
    storage = a.untyped_storage()
    # Empty tensors may all report address 0: they share nothing.
    return storage.nbytes() > 0 and storage.data_ptr() == b.untyped_storage().data_ptr()


def _relation(out: torch.Tensor, others: list[tuple[str, torch.Tensor]]) -> Relation:
    """``out`` is the first of ``others`` it is, else views the first it shares memory with."""
    for name, other in others:
        if out is other:
            return ("is", name)
    for name, other in others:
        if _shares(out, other):
            offset = out.storage_offset() * out.element_size()
            start = other.storage_offset() * other.element_size()
            return ("views", name, tuple(out.shape), out.stride(), offset - start)
    return ("own",)


def aliasing(outputs: list[torch.Tensor], inputs: list[tuple[str, torch.Tensor]]) -> list[Relation]:
    """Each output's relation to the inputs, else to the outputs before it."""
    return [
        _relation(out, inputs + [(f"output {j}", o) for j, o in enumerate(outputs[:k])])
        for k, out in enumerate(outputs)
    ]


def describe(relation: Relation) -> str:
    if relation[0] == "is":
        return f"is {relation[1]} itself"
    if relation[0] == "views":
        _, name, shape, stride, offset = relation
        return f"views {name} (shape {shape}, strides {stride}, {offset} bytes in)"
    return "has memory of its own"


def _call_problem(
    where: str,
    result: Any,
    expected: list[torch.Tensor],
    runner_side: Arguments,
    eager_side: Arguments,
    tol: Any,
) -> str | None:
    """The caller's tensors, the outputs' memory and the outputs' values, against eager."""
    if not isinstance(result, list) or len(result) != len(expected):
        return f"{where}: returned {type(result).__name__}, expected {len(expected)} tensors"
    mine, theirs = named_tensors(runner_side), named_tensors(eager_side)
    for index, (got, want) in enumerate(zip(aliasing(result, mine), aliasing(expected, theirs))):
        if got != want:
            return f"{where}: output {index} {describe(got)}, where eager's {describe(want)}"
    for (name, got), (_, want) in zip(mine, theirs):
        problem = compare(got, want, tol)
        if problem is not None:
            return f"{where}: the caller's {name} afterwards: {problem}"
    for index, (actual, want) in enumerate(zip(result, expected)):
        problem = compare(actual, want, tol)
        if problem is not None:
            return f"{where}: output {index}: {problem}"
    return None


def _sequence_problem(program: Program, config: CheckConfig, graphs: bool) -> str | None:
    """Calls a runner of ``program`` through GRAPH_CALLS (or EAGER_CALLS with graphs off)."""
    fn = Wrapped(program, config, config.target.eager_break_during_capture)
    eager_fn = Wrapped(program, config)
    pool = torch.cuda.graph_pool_handle() if graphs else None
    options = {"pool": pool, "debug": True} if graphs else {"enabled": False}
    mode = "graphs on" if graphs else "graphs disabled"
    try:
        runner = runner_class(config)(fn, **options)
    except Exception as error:
        return f"{mode}: making a runner with {sorted(options)} raised {describe_error(error)}"
    tol = program_tolerance(program, fn.table)
    first: dict[str, list[Any]] = {}
    caller = torch.cuda.Stream()
    runner_side = eager_side = None
    for call in GRAPH_CALLS if graphs else EAGER_CALLS:
        if not call.again or runner_side is None or eager_side is None:
            runner_side, eager_side = fn.arguments(call), fn.arguments(call)
        where = f"{mode}, call {call.label!r}"
        expected = eager_fn(*eager_side[0], **eager_side[1])
        before = fn.calls
        caller.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(caller), collector_paused():
            try:
                result = runner(*runner_side[0], **runner_side[1])
            except Exception as error:
                return f"{where}: the runner raised {describe_error(error)}"
            if torch.cuda.current_stream() != caller:
                return f"{where}: the caller's stream is not current after the call"
        torch.cuda.current_stream().wait_stream(caller)
        torch.cuda.synchronize()
        problem = _call_problem(where, result, expected, runner_side, eager_side, tol)
        if problem is not None:
            return problem
        ran = fn.calls - before
        if call.repeats is None and ran < 2:
            return (
                f"{where}: a new signature ran the function {ran} times, expected a warm-up "
                "run and a capture"
            )
        # Outputs that share no memory with the caller's tensors are the runner's own, kept
        # per signature.
        inputs = [x for _, x in named_tensors(eager_side)]
        own = [k for k, out in enumerate(expected) if not any(_shares(out, x) for x in inputs)]
        if call.repeats is not None:
            if ran != (0 if graphs else 1):
                return f"{where}: a repeated signature ran the function {ran} times"
            if any(result[k] is not first[call.repeats][k] for k in own):
                return f"{where}: a repeated signature returned other tensors than its first call"
        else:
            first[call.label] = list(result)
            if graphs and pool_of(result[-1]) != tuple(pool):
                return f"{where}: the capture did not allocate in the runner's pool {pool}"
    return None


def runner_problem(program: Program, config: CheckConfig) -> str | None:
    return _sequence_problem(program, config, graphs=True) or _sequence_problem(
        program, config, graphs=False
    )


def debug_problem(config: CheckConfig) -> str | None:
    """``debug=True`` reports a static output moved by the caller; without it, no check runs.
    Without a ``pool``, the captures of two signatures share one."""
    runner = runner_class(config)
    x = torch.randn(8, device=config.device)
    for debug in (True, False):
        try:
            run = runner(lambda t: t * 2, debug=True) if debug else runner(lambda t: t * 2)
            run(x)
            out = run(x)
            other = run(x[:4])
        except Exception as error:
            return (
                f"debug={debug}: a runner whose buffers never moved raised {describe_error(error)}"
            )
        pools = {pool_of(out), pool_of(other)}
        if len(pools) != 1 or None in pools:
            return f"the captures of two signatures of one runner lie in graph pools {pools}"
        out.set_(torch.empty_like(out))  # the caller moves the static output
        try:
            run(x)
        except RuntimeError:
            if not debug:
                return "a runner without debug=True checked its buffers and raised"
        else:
            if debug:
                return "a runner with debug=True did not report a static output that moved"
    return None


# The library's documented default, for a target whose signature declares none (one that
# takes its options as **kwargs, say).
DEFAULT_WARMUP = 1


@dataclass(eq=False)  # hashable by identity, as a function is
class Counted:
    """``t * 2 + 1``, counting its runs; float32 on purpose, since a cold-kernel dtype could
    fail a capture with no warm-up on a GPU, which ``warmup=0`` must not be blamed for."""

    runs: int = 0

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        self.runs += 1
        return t * 2 + 1


# How the fixed scenario makes each runner, and its warm-up count (None: the declared default).
MADE: tuple[tuple[str, Callable[[Any, Counted], Any], int | None], ...] = (
    ("fn by keyword, default warmup", lambda cls, fn: cls(fn=fn), None),
    ("warmup=0", lambda cls, fn: cls(fn, warmup=0), 0),
    ("warmup=2", lambda cls, fn: cls(fn, warmup=2), 2),
)
# Arguments a runner must refuse at construction, the errors that may refuse them, and a word
# the message must hold (None: Python's own message for a call that does not fit a signature).
REFUSED: tuple[tuple[str, Callable[[Any], Any], tuple[type[Exception], ...], str | None], ...] = (
    ("warmup=-1", lambda cls: cls(Counted(), warmup=-1), (ValueError,), "warmup"),
    ("warmup=True", lambda cls: cls(Counted(), warmup=True), (ValueError, TypeError), "warmup"),
    ("warmup=1.5", lambda cls: cls(Counted(), warmup=1.5), (ValueError, TypeError), "warmup"),
    ("a fn that is not callable (42)", lambda cls: cls(42), (TypeError,), "callable"),
    ("an option by position", lambda cls: cls(Counted(), 1), (TypeError,), None),
)


def declared_warmup(config: CheckConfig) -> Any:
    """The default ``warmup`` the target's runner declares (other targets are judged by it)."""
    try:
        parameter = inspect.signature(runner_class(config)).parameters.get("warmup")
    except (TypeError, ValueError):  # a signature inspect cannot read
        parameter = None
    if parameter is None or parameter.default is inspect.Parameter.empty:
        return DEFAULT_WARMUP
    return parameter.default


def _runs_problem(config: CheckConfig, default: int) -> str | None:
    """Each runner of MADE runs a new signature's function ``warmup + 1`` times, as eager."""
    x = torch.arange(8.0, device=config.device)
    for label, make, warmup in MADE:
        fn = Counted()
        count = default if warmup is None else warmup
        caller = torch.cuda.current_stream()
        try:
            # The stream is put back on leaving, so that a runner that moves it is named for
            # that, and not for the wrong values its caller would then read unordered.
            with torch.cuda.stream(caller), collector_paused():
                result = make(runner_class(config), fn)(x)
                moved = torch.cuda.current_stream() != caller
        except Exception as error:
            return f"{label}: making a runner and calling it raised {describe_error(error)}"
        if moved:
            return f"{label}: the caller's stream is not current after the call"
        if fn.runs != count + 1:
            return (
                f"{label}: a new signature ran the function {fn.runs} times, expected "
                f"{count + 1} ({count} warm-up and the capture)"
            )
        if not isinstance(result, torch.Tensor) or not torch.equal(result, x * 2 + 1):
            return f"{label}: the result differs from eager"
    return None


def _left_behind(config: CheckConfig, caller: torch.cuda.Stream) -> str | None:
    if torch.cuda.current_stream() != caller:
        return "another stream is current after the refusal"
    if config.target.BreakableCUDAGraphCapture.current() is not None:
        return "a capture is active after the refusal"
    return None


def _refusal_problem(config: CheckConfig) -> str | None:
    """Each argument of REFUSED raises one of its errors at construction, leaving nothing."""
    caller = torch.cuda.Stream()
    for label, make, errors, word in REFUSED:
        expected = " or ".join(error.__name__ for error in errors)
        with torch.cuda.stream(caller):
            try:
                make(runner_class(config))
            except errors as error:
                left = _left_behind(config, caller)
                if left is not None:
                    return f"{label}: {left}"
                if word is not None and word not in str(error):
                    return f"{label}: the error {error!r} does not name {word!r}"
                continue
            except Exception as error:
                return (
                    f"{label}: making a runner raised {describe_error(error)}, expected {expected}"
                )
        return f"{label}: making a runner was accepted, expected {expected}"
    return None


def arguments_problem(config: CheckConfig) -> str | None:
    """The runner takes and refuses its arguments as documented (the module docstring)."""
    default = declared_warmup(config)
    if isinstance(default, bool) or not isinstance(default, int) or default < 1:
        return (
            f"the runner declares a default warmup of {default!r}, expected an int >= 1: "
            "a function's first run would be inside the capture"
        )
    return _runs_problem(config, default) or _refusal_problem(config)


def example(program: Program, scenario: dict[str, Any], config: CheckConfig) -> str | None:
    """Re-checks one finding's program (a reproducer calls this)."""
    return arguments_problem(config) or runner_problem(program, config) or debug_problem(config)


def check(config: CheckConfig) -> CheckResult:
    if runner_class(config) is None:
        return CheckResult(NAME, 0, 0.0, not_applicable=f"the target has no {RUNNER}")

    def run() -> tuple[int, list[Finding]]:
        # The arguments first: a runner that takes them otherwise than documented would show
        # up as a miscount on a drawn program, which names a symptom, not the argument.
        found = Findings(NAME, config)
        found.fixed(arguments_problem)

        def body(program: Program) -> Finding | None:
            problem = runner_problem(program, config)
            if problem is None:
                return None
            return property_finding(NAME, "target-bug", problem, program, config.seed)

        # An argument bug would show again on the programs as a mere miscount.
        if not found.found:
            for program in FIXED_PROGRAMS:
                if found.going:
                    found.examples += 1
                    found.add(body(program))
            found.search(program_strategy(config), body, max(1, config.examples // COST))
        found.fixed(debug_problem)
        return found.result()

    return timed(NAME, run)
