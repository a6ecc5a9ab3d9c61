"""Property 1, memory-pool reuse: captures sharing one pool replay correctly, cost one pool,
and hold nothing once dropped.

A capture given ``pool=p`` is asked directly where its memory lies: every tensor of its
region and every allocator entry it gained in a graph pool must be in ``p``. Several drawn
programs are captured one after another into one pool, freed memory is scribbled, and each capture replayed in capture order must equal eager. A drawn capture set
(:mod:`.capture_set`) captures the first program at several batch sizes into one pool, largest
first, replays them in any order, drops and captures some again; each replay must equal
eager and the pool's memory must come back once the set is dropped. A chain with k breaks
may reserve at most 1.05 times the graph-pool memory of the same program captured as one
graph, or one allocator segment (2 MiB, what any small allocation in a pool reserves) where
that is more, so that a one-graph capture reserving nothing is no baseline for a ratio. Intermediates given to breaks should die while the capture lives (if not, a
``memory-held`` finding with the figure; a target-bug on the fixed witnesses for a target that
declares it releases them), and everything must die, the graph pools' reserved memory back to
its baseline, once the captures are dropped. Replaying out of capture order is
demonstrated as a ``known-unsafe`` note that never counts against a target; where the
allocator gives the demonstration no shared memory, or a question has nothing to ask about,
the check says so as an ``undecided`` note, never a harness error.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import inspect
import math
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from hypothesis import strategies as st

from verification.causes import KEPT_ALIVE, Problem, describe, within
from verification.divergence import TENSOR_REBUILT, handed_cause, layout_cause
from verification.execute import (
    OWNED,
    BreakEntry,
    BreakLog,
    TensorLayout,
    collector_paused,
    handed_layout,
    run_steps,
    step_callables,
    tensor_layouts,
    type_label,
)
from verification.findings import KNOWN_UNSAFE, TARGET_BUG, UNDECIDED, Finding
from verification.ops.spec import TensorMeta
from verification.programs import Program, Step, default_ops, make_inputs, op_table
from verification.properties.base import (
    CheckConfig,
    CheckResult,
    Findings,
    program_strategy,
    property_finding,
    timed,
)
from verification.properties.capture_set import (
    CaptureSet,
    capture_set_problem,
    capture_sets,
    from_data,
)
from verification.properties.memory import ArgumentWatch, held_bytes, scribble_freed
from verification.properties.runs import (
    DEFAULT_POOL,
    ProgramRun,
    capture_streams,
    graph_pool_bytes,
    settle,
)
from verification.targets import RELEASE_DECLARATION

NAME = "pool"
REPLAY_ROUNDS = 3
RATIO = 1.05
# The least the caching allocator reserves for an allocation in a pool: a small request (up to
# 1 MiB, a few bytes included) takes a 2 MiB segment. A ratio to a one-graph capture that
# allocates nothing in its pool would call that one allocation a cost without bound, so up to
# one segment is allowed whatever the one-graph capture reserves; beyond it the ratio judges.
SEGMENT_BYTES = 2 << 20
# An example costs about five fuzz examples: the hypothesis budget is divided by this.
COST = 5

# Two segments whose temporaries die: one pool reuses the first segment's blocks in the
# second, a pool per segment cannot.
_META = TensorMeta((64,), torch.float32)
WITNESS = Program(
    inputs=(_META,),
    steps=(
        Step("exp", (0,), (), False),
        Step("neg", (1,), (), False, (1,)),
        Step("do_nothing", (2,), (), True),
        Step("do_nothing", (0,), (), True),
        Step("exp", (2,), (), False, (2,)),
        Step("neg", (3,), (), False, (3,)),
    ),
    outputs=(4,),
)


# Capture intermediates given to breaks in every way arguments are passed, each dropped by
# the caller right after: in a list inside a namedtuple (written in place), a dataclass, a
# dict, and by keyword. Breaks here return fresh tensors, so only under ``returns``.
_PAIR = (_META, _META)
ARGUMENT_WITNESS = Program(
    inputs=_PAIR,
    steps=(
        Step("exp", (0,), (), False),
        Step("neg", (1,), (), False),
        Step("shrink_pair_", (2, 3), (), True),
        Step("mul", (4, 3), (), False, (2, 3, 4)),
        Step("sin", (5,), (), False),
        Step("pair_mix", (5, 6), (), True, (6,)),
        Step("dict_mix", (7, 5), (), True, (7,)),
        Step("blend", (8, 5), (("weight", 0.5),), True, (5, 8)),
    ),
    outputs=(9,),
)


def _one_graph_version(program: Program) -> Program | None:
    """The program with every break inlined, or None when a break cannot be captured."""
    table = op_table()
    steps = []
    for step in program.steps:
        spec = table[step.op]
        if spec.kind == "break":
            if spec.outputs or spec.mutates:
                return None
            continue  # a break that only reads changes no value
        steps.append(dataclasses.replace(step, brk=False))
    return Program(program.inputs, tuple(steps), program.outputs)


def _one_graph_pool_bytes(program: Program, config: CheckConfig) -> int:
    """Graph-pool bytes of ``program`` captured as one plain CUDA graph."""
    table = op_table()
    callables = step_callables(program, table, lambda fn: fn, BreakLog())

    static = [x.clone() for x in make_inputs(program, config.seed, config.device)]
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run_steps(program, table, callables, static)
        before = graph_pool_bytes()
        with collector_paused():
            graph.capture_begin(pool=torch.cuda.graph_pool_handle())
            try:
                outputs = run_steps(program, table, callables, static)
            finally:
                graph.capture_end()
        used = graph_pool_bytes() - before
    torch.cuda.current_stream().wait_stream(side)
    del outputs, static
    graph.reset()
    return used


def _watched_run(program: Program, config: CheckConfig, watch: ArgumentWatch, **kw) -> ProgramRun:
    last = len(program.steps)
    return ProgramRun(
        program,
        config.target,
        config.kind,
        config.device,
        config.seed,
        wrap=watch.wrap,
        hook=lambda i, env: watch.hook(i, env, last),
        **kw,
    )


def _held_now(runs: list[ProgramRun], watch: ArgumentWatch) -> int:
    """Bytes of graph intermediates given to breaks that only the captures keep alive."""
    gc.collect()
    mine = {
        t.untyped_storage().data_ptr() for run in runs for t in (*run.outputs, *run.static_inputs)
    }
    return held_bytes(watch.alive(exclude=mine, pool_only=True))


def _ratio_problem(program: Program, config: CheckConfig, held: list[int]) -> str | None:
    flat = _one_graph_version(program)
    if flat is None or not program.num_breaks:
        return None
    settle(config.kind)
    before = graph_pool_bytes()
    watch = ArgumentWatch()
    run = _watched_run(program, config, watch)
    chained = graph_pool_bytes() - before
    kept = _held_now([run], watch)
    run.drop()
    del run
    settle(config.kind)
    single = _one_graph_pool_bytes(flat, config)
    allowed = max(RATIO * single, SEGMENT_BYTES)
    if chained <= allowed:
        return None
    if kept and chained <= allowed + kept:
        held.append(kept)  # the excess is the arguments it holds: reported as memory held
        return None
    if single < SEGMENT_BYTES:
        # A ratio to (almost) nothing says nothing; the bytes over one segment do.
        return (
            f"a capture with {program.num_breaks} breaks reserves {chained} bytes of graph "
            f"pool where the same program captured as one graph reserves {single}: "
            f"{chained - SEGMENT_BYTES} bytes more than the one {SEGMENT_BYTES}-byte allocator "
            "segment that any allocation inside a capture reserves, so the breaks themselves "
            "cost pool memory (a pool per segment, or memory each segment allocates and keeps)"
        )
    return (
        f"a capture with {program.num_breaks} breaks reserves {chained} bytes of graph "
        f"pool, {chained / single:.2f}x the {single} bytes of the same program "
        f"captured as one graph (at most {RATIO}x)"
    )


def _shared_pool_problem(
    programs: list[Program], config: CheckConfig, held: list[int]
) -> str | None:
    settle(config.kind)
    # Graph pools only: what the default pool caches depends on everything the process ran
    # before (cuBLAS workspaces, the scribbling below, other tests), and on the H200 it
    # drifted by hundreds of MB in a busy test worker while the captures' pools came back.
    baseline = graph_pool_bytes()
    pool = torch.cuda.graph_pool_handle()
    watch = ArgumentWatch()
    runs: list[ProgramRun] = []
    try:
        for program in programs:
            runs.append(_watched_run(program, config, watch, pool=pool))
        scribble_freed(pool, config.kind, config.device)
        for round_ in range(REPLAY_ROUNDS):
            for number, run in enumerate(runs):
                problem = run.replay_problem(config.seed + 1 + round_)
                if problem is not None:
                    return within(
                        f"capture {number} of {len(runs)} sharing a pool, round {round_}: ", problem
                    )
        torch.cuda.synchronize()
        held.append(_held_now(runs, watch))
    finally:
        captures = _weakly([run.capture for run in runs])
        # Dropped as an engine drops them, with the cyclic collector off (vLLM freezes it
        # after capture): what only the collector would free is never freed there.
        with collector_paused():
            for run in runs:
                run.drop()
            runs.clear()
            kept = sum(capture() is not None for capture in captures)
    if kept:
        gc.collect()
        held = sum(capture() is not None for capture in captures)
        why = (
            "something outside them still holds them (a module, class or registry), even "
            "after the cyclic collector ran"
            if held
            else "no reference is left but a cycle of their own: with the cyclic collector "
            "frozen or off, as engines keep it after capture"
        )
        return Problem(
            f"{kept} of {len(captures)} dropped captures are still alive: {why}; their graphs "
            "and pool memory are never freed",
            KEPT_ALIVE,
        )
    settle(config.kind)
    alive = watch.alive()
    if alive:
        return (
            f"{len(alive)} tensors given to breaks ({held_bytes(alive)} bytes) are still alive "
            "after every capture and caller reference was dropped"
        )
    after = graph_pool_bytes()
    if after > baseline:
        return (
            f"graph pools reserve {after} bytes after the captures were dropped, "
            f"{baseline} before they were made"
        )
    return None


def _weakly(captures: list[Any]) -> list[Callable[[], Any]]:
    """Weak references to ``captures`` (none for an object that takes no weak reference)."""
    try:
        return [weakref.ref(capture) for capture in captures if capture is not None]
    except TypeError:
        return []


def _pool_id(segment: dict[str, Any]) -> tuple[int, int]:
    return tuple(segment.get("segment_pool_id") or DEFAULT_POOL)  # type: ignore[return-value]


def _pool_holding(address: int, segments: list[dict[str, Any]]) -> tuple[int, int] | None:
    """The pool of the allocator entry holding ``address``, None when none holds it."""
    for segment in segments:
        if segment["address"] <= address < segment["address"] + int(segment["total_size"]):
            return _pool_id(segment)
    return None


def _pools_named(pools: list[tuple[int, int]]) -> str:
    return " and ".join(str(p) for p in pools)


def pool_placement_problem(config: CheckConfig, undecided: list[str] | None = None) -> str | None:
    """A capture given ``pool=p`` puts what its region allocates, in every segment, in pool
    ``p``: asked of the allocator (``torch.cuda.memory_snapshot()``, each entry's
    ``segment_pool_id``), not shown through a corruption that depends on reuse.

    Where nothing the region made lies in a graph pool, there is nothing to ask: the reason is
    appended to ``undecided`` (a note, never a finding). The break writes into a caller-provided
    buffer, so this runs under every contract.
    """
    target = config.target

    @target.eager_break_during_capture
    def take(y: torch.Tensor, out: torch.Tensor) -> None:
        out.copy_(y)

    x = torch.randn(64, device=config.device)
    out = torch.zeros_like(x)
    pool = torch.cuda.graph_pool_handle()
    given = tuple(pool)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    torch.cuda.synchronize()
    before = {(s["address"], _pool_id(s)) for s in torch.cuda.memory_snapshot()}
    capture = target.BreakableCUDAGraphCapture(pool=pool)
    with torch.cuda.stream(side), collector_paused(), capture:
        first = x * 2  # the segment before the break
        take(first, out)
        second = first + 1  # the segment after it
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    segments = torch.cuda.memory_snapshot()
    made = {
        "the tensor its region made before its break": first.untyped_storage().data_ptr(),
        "the one after it": second.untyped_storage().data_ptr(),
    }
    lies = {name: _pool_holding(address, segments) for name, address in made.items()}
    # Memory the region took and freed again (or that no tensor above holds): the entries
    # the allocator gained in graph pools while the capture was open.
    gained = {_pool_id(s) for s in segments if (s["address"], _pool_id(s)) not in before}
    reset = getattr(capture, "reset", None)
    if callable(reset):
        reset()
    del capture, first, second
    graph_pools = {p for p in (*lies.values(), *gained) if p is not None and p != DEFAULT_POOL}
    elsewhere = sorted(graph_pools - {given})
    if elsewhere:
        placed = "; ".join(
            f"{name} in {'the default pool' if p in (None, DEFAULT_POOL) else p}"
            for name, p in lies.items()
        )
        also = " as well as in the given one" if given in graph_pools else " instead"
        return (
            f"a capture given pool={given} put its memory in graph "
            f"{'pools' if len(elsewhere) > 1 else 'pool'} {_pools_named(elsewhere)}{also} "
            f"({placed}): captures given one pool to share (an engine's batch sizes) then share "
            "nothing, so graph memory grows with every capture, and what their caller assumes "
            "of reuse between them (their replay order) no longer holds"
        )
    if given not in graph_pools and undecided is not None:
        undecided.append(
            f"where a capture given pool={given} puts its memory was not decided: nothing its "
            "region made lies in a graph pool (its tensors lie in the default pool, as "
            "eagerly run work does)"
        )
    return None


def _allocated(address: int, nbytes: int, snapshot: list[dict[str, Any]]) -> bool:
    """Whether the allocator holds ``[address, address + nbytes)`` as allocated: a block of a
    segment's ``blocks`` (torch's snapshot), or an entry of its own (the simulator's)."""
    for entry in snapshot:
        for block in entry.get("blocks") or [entry]:
            start = int(block["address"]) if "address" in block else int(entry["address"])
            size = int(block.get("size", block.get("total_size", 0)))
            taken = block.get("state") == "active_allocated" or int(block.get("allocated_size", 0))
            if taken and start <= address and address + nbytes <= start + size:
                return True
    return False


def returned_memory_problem(config: CheckConfig) -> str | None:
    """A new tensor that a decorated call returns at capture (a logits processor's) owns
    memory that stays allocated while its caller holds it: asked of the allocator, and of a
    tensor allocated right after the call, which must not land on it. Contracts whose breaks
    return no device tensor are not asked; a target that refuses the return is not either."""
    target = config.target
    # A reproducer's target is the module itself, without the harness's contract: it asks.
    if not getattr(getattr(target, "contract", None), "device_returns", True):
        return None

    @target.eager_break_during_capture
    def fresh(y: torch.Tensor) -> torch.Tensor:
        return y * 2

    x = torch.randn(256, device=config.device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    capture = target.BreakableCUDAGraphCapture()
    try:
        with torch.cuda.stream(side), collector_paused(), capture:
            got = fresh(x + 1)
            after = x * 3  # where memory freed under the caller's result would go first
    except Exception:  # refused (a strict target), or a failure other questions name
        return None
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    problem = None
    if isinstance(got, torch.Tensor):  # a target that returns something else: nothing to ask
        if _overlapping(got, after):
            problem = "shares its memory with a tensor the caller allocated after the call"
        elif not _allocated(got.data_ptr(), got.nbytes, torch.cuda.memory_snapshot()):
            problem = "lies in memory the allocator holds as free"
    reset = getattr(capture, "reset", None)
    if callable(reset):
        reset()
    del capture
    if problem is None:
        return None
    return (
        f"the new tensor a decorated call returned at capture {problem}: the target handed "
        "its caller an alias that does not own the result's memory (a non-owning reference), "
        "so the caller reads, and later allocations write, memory that is no longer the result"
    )


def _overlapping(a: torch.Tensor, b: torch.Tensor) -> bool:
    a0, b0 = a.data_ptr(), b.data_ptr()
    return a0 < b0 + b.nbytes and b0 < a0 + a.nbytes


def out_of_order_demonstration(config: CheckConfig) -> Finding:
    """Shows that replaying captures of one pool out of order is caught (never a target bug).

    It asks first whether the second capture's output took the first capture's freed
    temporary; where it did not, no replay order can corrupt it here, and the result is an
    ``undecided`` note, never a harness error.
    """
    target, device = config.target, config.device
    x = torch.randn(128, device=device)
    pool = torch.cuda.graph_pool_handle()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    # The caching allocator hands a freed block only to allocations on its own stream, so
    # both captures must run on one stream; targets that take a `stream` are given it.
    accepts_stream = "stream" in inspect.signature(target.BreakableCUDAGraphCapture).parameters
    on_side = {"stream": side} if accepts_stream else {}
    with torch.cuda.stream(side):
        first = target.BreakableCUDAGraphCapture(pool=pool, **on_side)
        with collector_paused(), first:
            temporary = x * 2  # 512 bytes, freed at the end of the capture
            freed_at = temporary.untyped_storage().data_ptr()
            out1 = temporary + 1
            del temporary
        second = target.BreakableCUDAGraphCapture(pool=pool, **on_side)
        with collector_paused(), second:
            out2 = x + 3  # may take the first capture's freed temporary
    torch.cuda.current_stream().wait_stream(side)
    reused = out2.untyped_storage().data_ptr() == freed_at
    expected = x + 3
    first.replay()
    second.replay()
    torch.cuda.synchronize()
    in_order = bool(torch.equal(out2, expected)) and bool(torch.equal(out1, x * 2 + 1))
    if not in_order:
        return property_finding(
            NAME, TARGET_BUG, "captures sharing a pool replayed in order differ from eager"
        )
    if not reused:
        return property_finding(
            NAME,
            UNDECIDED,
            "the out-of-order replay hazard was not shown: the allocator placed the second "
            "capture's output apart from the first capture's freed temporary, so no replay "
            "order corrupts it in this run (where captures given one pool put their memory is "
            "asked directly: see any finding on pool placement)",
        )
    second.replay()
    first.replay()
    torch.cuda.synchronize()
    if torch.equal(out2, expected):
        return property_finding(
            NAME,
            UNDECIDED,
            "the out-of-order replay hazard was not shown: the second capture's output took "
            "the first capture's freed temporary, yet replaying the first after the second left "
            "it as eager computes it",
        )
    return property_finding(
        NAME,
        KNOWN_UNSAFE,
        "replaying the second of two captures sharing a pool before the first overwrote the "
        "second's output (the documented hazard; caught by the checker, not a target bug)",
    )


class ScaledTensor(torch.Tensor):
    """A tensor subclass that carries a Python attribute, as quantized activations carry their
    scale."""


def arguments_as_given_problem(config: CheckConfig) -> str | None:
    """A conjugate view, a negative view and a tensor subclass instance, all capture
    intermediates given to a break, reach it at replay as they were given.

    The bits live on the tensor and the subclass on its Python object, not in its memory: a
    target that rebuilds pool tensors from their storage for replay (this library,
    ``breakable-cuda-graphs``) drops them unless it holds such tensors as they are. The break
    writes into caller-provided buffers, so this runs under every contract.
    """
    target = config.target
    handed: list[BreakEntry] = []

    @target.eager_break_during_capture
    def take(conj, neg, scaled, out_conj, out_neg, out_scaled):
        handed.append((0, tensor_layouts((conj, neg, scaled, out_conj, out_neg, out_scaled), {})))
        out_conj.copy_(conj)
        out_neg.copy_(neg)
        # A plain tensor in its place is no ScaledTensor, whatever attributes it carries: NaN,
        # which no comparison accepts.
        kept = isinstance(scaled, ScaledTensor)
        out_scaled.copy_(
            scaled.as_subclass(torch.Tensor)
            * (getattr(scaled, "scale", math.nan) if kept else math.nan)
        )

    x = torch.randn(16, dtype=torch.complex64, device=config.device)
    z = torch.randn(16, device=config.device)
    out_conj = torch.zeros_like(x)
    out_neg, out_scaled = torch.zeros_like(z), torch.zeros_like(z)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    capture = target.BreakableCUDAGraphCapture()
    with torch.cuda.stream(side), collector_paused(), capture:
        y = x * 2  # in pool memory
        scaled = (z * 2).as_subclass(ScaledTensor)
        scaled.scale = 3.0
        take(y.conj(), y.conj().imag, scaled, out_conj, out_neg, out_scaled)
        del y, scaled
    torch.cuda.current_stream().wait_stream(side)
    x.copy_(torch.randn(16, dtype=torch.complex64, device=config.device))
    z.copy_(torch.randn(16, device=config.device))
    given = handed[:1]
    capture.replay()
    torch.cuda.synchronize()
    moved = handed_layout(handed[1:2], given)
    if moved is not None:
        names = ("conjugate view", "negative view", "tensor subclass", "buffer")
        name = names[min(moved[1], 3)]
        return Problem(
            f"capture intermediates given to a break reached it at replay not as they were "
            f"given: a {name} with another {' and '.join(moved[4])} ({moved[2]}, given "
            f"{moved[3]})",
            layout_cause(moved[4]),
        )
    wrong = [
        name
        for name, got, want in (
            ("conjugate view without its bit (is_conj)", out_conj, (x * 2).conj()),
            ("negative view without its bit (is_neg)", out_neg, (x * 2).conj().imag),
            ("tensor subclass without its Python type", out_scaled, z * 2 * 3.0),
        )
        if not torch.allclose(got, want)
    ]
    if wrong:
        return Problem(
            "capture intermediates given to a break reached it at replay not as they were "
            f"given: a {', a '.join(wrong)} (a plain tensor over the same memory instead)",
            TENSOR_REBUILT,
        )
    return None


# Views of one capture intermediate that all start where it starts: name -> the view. A
# target that keys what it holds for replay by address alone hands a break one view for all.
SAME_START_VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "the tensor": lambda y: y,
    "its transpose": lambda y: y.t(),
    "its first row": lambda y: y[0],
    "its first column": lambda y: y[:, 0],
    "a flat view": lambda y: y.view(-1),
    "its first two columns": lambda y: y[:, :2],
    "an int32 view of its bits": lambda y: y.view(torch.int32),
}


def views_as_given_problem(config: CheckConfig) -> str | None:
    """Views of one capture intermediate that start at the same address, given to one break
    together, each reach it at replay with its own shape, strides and dtype.

    Address alone does not name a tensor: a target that rebuilds, caches or looks up the
    aliases it replays with by ``data_ptr()`` gives every such view the first one's layout.
    The break writes into caller-provided buffers, so this runs under every contract.
    """
    target = config.target
    layouts: list[tuple[TensorLayout, ...]] = []

    @target.eager_break_during_capture
    def take(*views_and_outs: torch.Tensor) -> None:
        views = views_and_outs[: len(SAME_START_VIEWS)]
        outs = views_and_outs[len(SAME_START_VIEWS) :]
        layouts.append(tensor_layouts(views, {}))
        for view, out in zip(views, outs):
            out.copy_(view.reshape(-1).to(torch.float64))

    x = torch.randn(4, 4, device=config.device)
    outs = [
        torch.zeros(view(x).numel(), dtype=torch.float64, device=config.device)
        for view in SAME_START_VIEWS.values()
    ]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    capture = target.BreakableCUDAGraphCapture()
    with torch.cuda.stream(side), collector_paused(), capture:
        y = x * 2  # in pool memory
        take(*(view(y) for view in SAME_START_VIEWS.values()), *outs)
        del y
    torch.cuda.current_stream().wait_stream(side)
    x.copy_(torch.randn(4, 4, device=config.device))
    given = layouts[0]
    layouts.clear()
    failed: BaseException | None = None
    try:
        capture.replay()
        torch.cuda.synchronize()
    except Exception as error:  # the break trips over a view of the wrong layout
        failed = error
    reset = getattr(capture, "reset", None)
    if callable(reset):
        reset()
    want = x * 2
    views = [view(want) for view in SAME_START_VIEWS.values()]
    seen = layouts[0] if layouts else given
    moved = handed_layout([(0, seen)], [(0, given)])
    if moved is not None:
        name, aspects = list(SAME_START_VIEWS)[moved[1]], moved[4]
        return Problem(
            "views of one capture intermediate starting at the same address reached a break at "
            f"replay not as they were given: {name} with another {' and '.join(aspects)} "
            f"({moved[2]}, given {moved[3]})",
            layout_cause(aspects),
        )
    wrong = [
        name
        for name, view, out in zip(SAME_START_VIEWS, views, outs)
        if failed is None and not torch.equal(out, view.reshape(-1).double())
    ]
    if failed is not None:
        return f"a break given views of one capture intermediate: replay raised {describe(failed)}"
    if wrong:
        return (
            "views of one capture intermediate starting at the same address reached a break at "
            f"replay in their layouts but with other values: {', '.join(wrong)}"
        )
    return None


class Pair(NamedTuple):
    first: torch.Tensor
    second: torch.Tensor


@dataclasses.dataclass
class Hidden:
    states: torch.Tensor
    scale: float


class ModelOutput(OrderedDict):
    """A dict subclass read by attribute, as ``transformers``' ``ModelOutput`` is."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


# Container name -> (build it around two capture intermediates, its expected types from the
# outside in, the sum of its tensors as the break reads them).
CONTAINERS: dict[str, tuple[Callable[[Any, Any], Any], tuple[type, ...], Callable[[Any], Any]]] = {
    "namedtuple": (Pair, (Pair,), lambda c: c.first + c.second),
    "dataclass": (lambda a, b: Hidden(a + b, 2.0), (Hidden,), lambda c: c.states * c.scale),
    "dict subclass (ModelOutput-like)": (
        lambda a, b: ModelOutput(logits=a, hidden=b),
        (ModelOutput,),
        lambda c: c.logits + c.hidden,
    ),
    "list": (lambda a, b: [a, b], (list,), lambda c: c[0] + c[1]),
    "nested tuples": (lambda a, b: (a, (b, a)), (tuple, tuple), lambda c: c[0] + c[1][0] + c[1][1]),
}


def _types_from_outside(container: Any, depth: int) -> tuple[type, ...]:
    types = [type(container)]
    for _ in range(depth - 1):
        container = container[-1]
        types.append(type(container))
    return tuple(types)


# The catalog's break ops that pass their tensors in containers.
CONTAINER_OPS = ("pair_mix", "dict_mix", "shrink_pair_")


def container_as_given_problem(name: str, config: CheckConfig) -> str | None:
    """A container of capture intermediates given to a break (as a model passes its outputs
    on) reaches it at replay as the same type, with the values of that replay.

    A target that rebuilds containers around aliases of pool tensors for replay must rebuild
    each as its own type: a namedtuple read by field, a ``ModelOutput`` read by attribute
    fails on a plain tuple or dict. The break writes into a caller-provided buffer, so this
    runs under every contract.
    """
    build, expected, read = CONTAINERS[name]
    target = config.target
    seen: list[tuple[type, ...]] = []

    @target.eager_break_during_capture
    def take(container: Any, out: torch.Tensor) -> None:
        seen.append(_types_from_outside(container, len(expected)))
        try:
            out.copy_(read(container))
        except (AttributeError, IndexError, KeyError, TypeError):
            out.fill_(math.nan)  # a container the break cannot read as it was given

    x = torch.randn(16, device=config.device)
    out = torch.zeros_like(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    capture = target.BreakableCUDAGraphCapture()
    with torch.cuda.stream(side), collector_paused(), capture:
        a, b = x * 2, x + 1  # in pool memory
        take(build(a, b), out)
        del a, b
    torch.cuda.current_stream().wait_stream(side)
    x.copy_(torch.randn(16, device=config.device))
    seen.clear()
    capture.replay()
    torch.cuda.synchronize()
    want = read(build(x * 2, x + 1))
    reset = getattr(capture, "reset", None)
    if callable(reset):
        reset()
    if seen and seen[0] != expected:
        got = ", ".join(map(type_label, seen[0]))
        given = ", ".join(map(type_label, expected))
        return Problem(
            f"a {name} of capture intermediates given to a break reached it at replay as "
            f"{got}, not as {given}",
            handed_cause(given, got, OWNED),
        )
    if len(seen) != 1 or not torch.allclose(out, want):
        return (
            f"a break given a {name} of capture intermediates read wrong values at replay "
            f"(called {len(seen)} times)"
        )
    return None


def _held_problem(held: list[int], config: CheckConfig) -> str | None:
    """Held bytes are a bug only for a target that declares it holds none."""
    if not (config.target.releases_break_arguments and held and max(held) > 0):
        return None
    return (
        f"the capture keeps alive {max(held)} bytes of its intermediates given to breaks that "
        f"the caller dropped, though the target declares {RELEASE_DECLARATION}"
    )


def _witness_problem(program: Program, config: CheckConfig, held: list[int]) -> str | None:
    kept: list[int] = []
    try:
        problem = (
            _ratio_problem(program, config, kept)
            or _shared_pool_problem([program, program], config, kept)
            # Drawn programs may give a break what no target can alias (a conj view): only
            # the fixed witnesses hold the declaration to account.
            or _held_problem(kept, config)
        )
    except Exception as error:  # the witnesses use only what every target must take
        return f"the target raised {describe(error)}"
    held.extend(kept)
    return problem


def _capture_set_problem(
    program: Program, capture_set: CaptureSet, config: CheckConfig
) -> str | None:
    """The capture set replays as eager, and its pool's memory comes back once it is dropped."""
    settle(config.kind)
    baseline = graph_pool_bytes()
    problem = capture_set_problem(program, capture_set, config)
    if problem is not None:
        return problem
    settle(config.kind)
    after = graph_pool_bytes()
    if after > baseline:
        return (
            f"graph pools reserve {after} bytes after a capture set of sizes "
            f"{capture_set.sizes} was dropped, {baseline} before it was made"
        )
    return None


def _drawn_problem(
    programs: list[Program], config: CheckConfig, held: list[int], capture_set: CaptureSet
) -> str | None:
    """One ratio per example (each costs three captures and three collections), then sharing,
    then the first program as a capture set."""
    try:
        return (
            _ratio_problem(programs[0], config, held)
            or _shared_pool_problem(programs, config, held)
            or _capture_set_problem(programs[0], capture_set, config)
        )
    except Exception as error:  # a drawn program the target cannot take is its finding
        return f"the target raised {describe(error)}"


def _witnesses(config: CheckConfig) -> list[Program]:
    return [WITNESS, ARGUMENT_WITNESS] if config.target.supports_tensor_returns else [WITNESS]


def example(program: Program, scenario: dict[str, Any], config: CheckConfig) -> str | None:
    """Re-checks one finding's program (a reproducer calls this)."""
    if program in (WITNESS, ARGUMENT_WITNESS):
        return _witness_problem(program, config, [])
    capture_set = from_data(scenario.get("capture_set"))
    return _drawn_problem([program, program], config, [], capture_set)


def check(config: CheckConfig) -> CheckResult:
    def run() -> tuple[int, list[Finding]]:
        held: list[int] = []
        found = Findings(NAME, config)

        def body(drawn: tuple[list[Program], CaptureSet]) -> Finding | None:
            programs, capture_set = drawn
            problem = _drawn_problem(programs, config, held, capture_set)
            if problem is None:
                return None
            scenario = (("capture_set", capture_set.as_data()),)
            return property_finding(NAME, TARGET_BUG, problem, programs[0], config.seed, scenario)

        undecided: list[str] = []
        found.fixed(functools.partial(pool_placement_problem, undecided=undecided))
        found.fixed(returned_memory_problem)
        found.fixed(arguments_as_given_problem)
        found.fixed(views_as_given_problem)
        before = len(found.found)
        for container in CONTAINERS:
            found.fixed(functools.partial(container_as_given_problem, container))
        # Once a container lost its type, the programs that pass containers to breaks would
        # only show that bug again, as a break failing to read its argument: left out.
        lost = len(found.found) > before
        witnesses = [WITNESS] if lost else _witnesses(config)
        ops = [s for s in default_ops() if s.name not in CONTAINER_OPS] if lost else None
        for program in witnesses:
            if found.going:
                found.examples += 1
                problem = _witness_problem(program, config, held)
                if problem is not None:
                    found.add(property_finding(NAME, TARGET_BUG, problem, program, config.seed))
        strategy = st.tuples(
            st.lists(program_strategy(config, ops=ops), min_size=2, max_size=3),
            capture_sets(streams=capture_streams(config.target)),
        )
        found.search(strategy, body, max(1, config.examples // COST))
        examples, findings = found.result()
        if held and max(held) > 0:
            findings.append(
                property_finding(
                    NAME,
                    "memory-held",
                    f"the capture keeps alive up to {max(held)} bytes of graph intermediates given "
                    "to breaks that the caller dropped (held strongly, not by a non-owning alias)",
                )
            )
        findings += [property_finding(NAME, UNDECIDED, note) for note in undecided]
        if found.going:
            findings.append(out_of_order_demonstration(config))
        return examples, findings

    return timed(NAME, run)
