"""Decides whether a target ran a program correctly, and says how it did not.

:func:`check_program` captures the program with the target, replays it several times on
fresh inputs and compares every replay with an eager run on the same inputs: outputs
(bitwise with NaN == NaN, or within the program's declared tolerance) and the break log
(one call per break step, in order, on the capture-time buffers). The first violation is
returned as a :class:`Finding`, with its cause as a value; a mismatch names the first place
where the replay parts from eager (:mod:`verification.divergence`). An exception from the eager reference is a harness bug
and raises :class:`InvalidProgram`. A replay that raises an error naming a break whose
result aliased its argument at capture and not then (or the reverse) is a refusal the
``returns`` contract allows (replay cannot be exact there), not a finding. Whatever a target
returns in place of a tensor is a mismatch, never an error of the harness.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from verification import bounds
from verification.causes import HUNG, Cause, Problem, describe, raised_cause
from verification.divergence import (
    AMBIENT,
    FOREIGN_CALLS,
    TENSOR_REBUILT,
    Parting,
    Recorder,
    calls_cause,
    first_parting,
    handed_cause,
    layout_cause,
    segment_of,
)
from verification.execute import (
    OWNED,
    BreakEntry,
    BreakLog,
    CapturedProgram,
    called_otherwise_message,
    foreign_message,
    handed_layout,
    handed_layout_message,
    handed_otherwise_message,
    left_otherwise,
    run_eager,
    state_left,
)
from verification.findings import OP_CONTRACT, TARGET_BUG, Finding
from verification.ops.spec import OpSpec
from verification.programs import Program, make_inputs, op_table, value_producers
from verification.targets import Target

# The check name of the findings of a program checked against eager.
FUZZ = "fuzz"
# What a finding of state a replay leaves otherwise than eager blames.
STATE_LEFT = Cause("state-left")
# A break whose result aliased its argument at capture and not at replay, refreshed in place.
SWITCHED_RESULT = Cause(
    "values", "a break's result, its argument at capture and a new tensor at replay, written over"
)
Violation = Literal[
    "mismatch",
    "break-count",
    "break-order",
    "break-args",
    "break-arg-types",
    "break-ambient",
    "state-left",
    "exception",
    "crash",
    "hang",
    "invalid-program",
]


class InvalidProgram(Exception):
    """The eager reference itself failed: the generator made a program it must not make."""


@dataclass(frozen=True)
class Tolerance:
    rtol: float = 0.0
    atol: float = 0.0

    @property
    def exact(self) -> bool:
        return self.rtol == 0.0 and self.atol == 0.0


def program_tolerance(program: Program, table: Mapping[str, OpSpec]) -> Tolerance:
    """The loosest tolerance among the program's non-deterministic ops, applied to all outputs."""
    loose = [table[s.op] for s in program.steps if not table[s.op].deterministic]
    if not loose:
        return Tolerance()
    return Tolerance(max(s.rtol for s in loose), max(s.atol for s in loose))


def _as_real(x: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(x) if x.is_complex() else x


def _detached(x: torch.Tensor) -> torch.Tensor:
    # detach makes a view, which on the simulator is a device op of its own.
    return x.detach() if x.requires_grad else x


def _widened(x: torch.Tensor) -> torch.Tensor:
    # One-byte floats (float8) have no comparison kernels, and a tolerance finer than their
    # step means nothing: they compare exactly, in float32, which holds each value exactly.
    return x.float() if x.dtype.is_floating_point and x.element_size() == 1 else x


def compare(
    actual: torch.Tensor, expected: torch.Tensor, tol: Tolerance = Tolerance()
) -> str | None:
    """``None`` when equal (same dtype, shape, NaNs, and values within ``tol``; one-byte
    floats exactly), else why not."""
    if not isinstance(actual, torch.Tensor):
        return f"got {type(actual).__name__} {actual!r:.80}, expected a tensor"
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype} != expected {expected.dtype}"
    if actual.shape != expected.shape:
        return f"shape {tuple(actual.shape)} != expected {tuple(expected.shape)}"
    if actual.dtype.is_floating_point and actual.element_size() == 1:
        tol = Tolerance()
    a = _widened(_as_real(_detached(actual)).cpu())
    e = _widened(_as_real(_detached(expected)).cpu())
    # Equal values are also equal, or close, under the checks below (NaN never compares
    # equal, so tensors holding one take the full path); one op instead of five.
    if torch.equal(a, e):
        return None
    if not (a.dtype.is_floating_point):
        equal = a == e
    elif tol.exact:
        equal = (a == e) | (a.isnan() & e.isnan())
    else:
        equal = torch.isclose(a, e, rtol=tol.rtol, atol=tol.atol, equal_nan=True)
    if bool(equal.all()):
        return None
    bad = (~equal).nonzero()[0].tolist()
    position = tuple(bad)
    return (
        f"{int((~equal).sum())} of {equal.numel()} elements differ; first at {position}: "
        f"got {a[position].tolist()}, expected {e[position].tolist()}"
    )


def check_breaks(
    log: Sequence[BreakEntry], break_steps: Sequence[int]
) -> tuple[str, str, int | None] | None:
    """``(kind, message, step)`` when a replay's break calls differ from the program's breaks
    in count or order (:func:`layout_changed` compares what each was handed)."""
    steps = [step for step, _ in log]
    if sorted(steps) != sorted(break_steps):
        counts = {s: steps.count(s) for s in break_steps}
        wrong = [s for s in (*break_steps, *steps) if counts.get(s, 0) != 1]
        return (
            "break-count",
            f"break steps called {steps}, expected each of {list(break_steps)} once",
            (wrong or [None])[0],
        )
    if steps != list(break_steps):
        return (
            "break-order",
            f"break steps called in order {steps}, expected {list(break_steps)}",
            None,
        )
    return None


def _types_changed(captured: CapturedProgram, program: Program) -> tuple[str, Cause] | None:
    changed = captured.structure_changed
    if changed is None:
        return None
    return handed_otherwise_message(changed, program), handed_cause(changed[2], changed[1], OWNED)


def layout_changed(
    log: Sequence[BreakEntry], capture_log: Sequence[BreakEntry], program: Program
) -> tuple[Problem, int] | None:
    """A tensor a replay (its break log ``log``) handed a break in another layout than the
    capture did: the problem, with its cause, and the break's step."""
    moved = handed_layout(log, capture_log)
    if moved is None:
        return None
    return Problem(handed_layout_message(moved, program), layout_cause(moved[4])), moved[0]


def _ambient_changed(captured: CapturedProgram, program: Program) -> tuple[str, Cause] | None:
    changed = captured.ambient_changed
    return None if changed is None else (called_otherwise_message(changed, program), AMBIENT)


def parting_of(
    program: Program,
    table: Mapping[str, OpSpec],
    replayed: Recorder,
    inputs: list[torch.Tensor],
    replay_seed: int,
    capture_seed: int,
    kind: str,
    differing: list[tuple[int, str]],
    tol: Tolerance,
) -> Parting | None:
    """Where a replay (its break calls ``replayed``) first parts from an eager run on the same
    ``inputs``; ``differing`` holds the outputs that differ, ``(index, how)``."""
    records = []
    for seed in (replay_seed, capture_seed):  # capture_seed: the host values given at capture
        recorder, log = Recorder(), BreakLog()
        log.recorder = recorder
        run_eager(program, table, inputs, seed, kind, log=log)
        records.append(recorder.calls)
    producers = value_producers(program, table)
    breaks = [i for i, s in enumerate(program.steps) if s.brk]
    outputs = [
        (index, segment_of(program.outputs[index], producers, breaks), how)
        for index, how in differing
    ]
    return first_parting(records[0], replayed.calls, records[1], outputs, tol.rtol, tol.atol)


def fresh_returns_read(program: Program, table: Mapping[str, OpSpec]) -> list[int]:
    """Break steps whose result is a fresh tensor (not an argument, not a buffer the program
    gave) that a later step or the program's outputs read."""
    read = set(program.outputs) | {a for step in program.steps for a in step.args}
    culprits = []
    for value, index in value_producers(program, table).items():
        step, spec = program.steps[index], table[program.steps[index].op]
        fresh = spec.aliasing == "none" and not spec.out_buffers
        if step.brk and fresh and value in read:
            culprits.append(index)
    return culprits


def _blame(finding: Finding, target: Target, table: Mapping[str, OpSpec]) -> Finding:
    """A finding on a program that breaks the target's contract blames the op, not the target."""
    if target.contract.refreshes_returns:
        return finding
    culprits = fresh_returns_read(finding.program, table)
    if not culprits:
        return finding
    ops = ", ".join(f"step {i} ({finding.program.steps[i].op})" for i in culprits)
    message = (
        f"{ops} returned a fresh tensor that later steps read, which contract "
        f"{target.contract.name} does not refresh at replay; {finding.message}"
    )
    return dataclasses.replace(finding, message=message, kind=OP_CONTRACT)


def refused(
    error: BaseException, switched: set[int], program: Program, table: Mapping[str, OpSpec]
) -> bool:
    """Whether ``error`` refuses a break that returned its argument on one call and a new
    tensor on another (steps ``switched``), naming it as the contract asks."""
    return any(
        table[program.steps[step].op].alias_varies
        and table[program.steps[step].op].entry in str(error)
        for step in switched
        if 0 <= step < len(program.steps)
    )


@dataclass(frozen=True)
class SharedPool:
    """A capture set of one program, as a fuzz example carries it: once the program alone
    replayed as eager, ``captures`` captures of it in one new pool, each on static inputs of
    its own (an engine's batch sizes, which share a pool and read their own buffers), replayed
    in ``order`` (indices into the captures, in capture order)."""

    captures: int
    order: tuple[int, ...]

    @property
    def scenario(self) -> tuple[tuple[str, object], ...]:
        """The finding's scenario entries, which a reproducer reads back."""
        return (("captures", self.captures), ("order", self.order))

    def describe(self) -> str:
        return (
            f"with {self.captures} captures of the program in one pool (each on inputs of its "
            f"own), replayed in order {list(self.order)}"
        )


def shared_pool_of(finding: Finding) -> SharedPool | None:
    """The capture set a fuzz finding's scenario records, or None (one capture)."""
    entries = dict(finding.scenario)
    if "captures" not in entries:
        return None
    return SharedPool(int(entries["captures"]), tuple(entries["order"]))


def check_program(
    program: Program,
    target: Target,
    device: str,
    seed: int = 0,
    replays: int = 3,
    ops: Sequence[OpSpec] | None = None,
    shared: SharedPool | None = None,
) -> Finding | None:
    """Captures ``program`` with ``target`` and checks ``replays`` replays against eager, then,
    with ``shared``, the capture set it describes; a finding's kind says whether the target
    or an op in the program broke the contract, and a finding only the set shows carries the
    set as its scenario."""
    table = op_table(ops)
    finding = _Check(program, target, device, seed, table).run(replays, shared)
    return None if finding is None else _blame(finding, target, table)


class _Check:
    """One program's check: its captures, and each replay against an eager run."""

    def __init__(
        self, program: Program, target: Target, device: str, seed: int, table: dict[str, OpSpec]
    ) -> None:
        self.program, self.target, self.device, self.seed = program, target, device, seed
        self.table = table
        self.kind = "cuda" if device.startswith("cuda") else "sim"
        self.tol = program_tolerance(program, table)
        self.break_steps = [i for i, s in enumerate(program.steps) if s.brk]
        self.shared: SharedPool | None = None  # set once the set's captures begin
        self.refused = False  # a replay was refused as the contract allows: nothing to judge
        self.replaying = 0  # the capture the set's replay under way belongs to
        # The validity check of the program doubles as the reference for the first replay.
        self.first_inputs = make_inputs(program, seed + 1, device)
        try:
            self.first_expected = run_eager(program, table, self.first_inputs, seed + 1, self.kind)
            self.first_left = state_left()
        except Exception as error:
            raise InvalidProgram(
                f"eager reference failed: {type(error).__name__}: {error}\nprogram: {program}"
            ) from error

    def finding(
        self,
        kind: Violation,
        message: str,
        replay: int | None = None,
        index: int | None = None,
        cause: Cause | None = None,
    ) -> Finding:
        scenario: tuple[tuple[str, object], ...] = ()
        if self.shared is not None:
            if replay is not None:
                message = f"replay {replay} (capture {self.replaying}): {message}"
            message, scenario = f"{self.shared.describe()}: {message}", self.shared.scenario
        return Finding(
            TARGET_BUG,
            FUZZ,
            message,
            kind,
            self.program,
            self.seed,
            replay_index=replay,
            index=index,
            scenario=scenario,
            explained=cause,
        )

    def run(self, replays: int, shared: SharedPool | None) -> Finding | None:
        first = self.capture(None)
        if isinstance(first, Finding):
            return first
        found = self.replays([first], [0] * replays, first=0)
        del first  # the set's captures start from the pool as the program found it
        if found is not None or shared is None or self.refused:
            return found
        # Only what the program's own capture did not show is the set's finding.
        self.shared = shared
        pool = torch.cuda.graph_pool_handle()
        captures = []
        for number in range(shared.captures):
            captured = self.capture(pool, number)
            if isinstance(captured, Finding):
                return captured
            captures.append(captured)
        return self.replays(captures, shared.order, first=replays)

    def capture(self, pool: object, number: int = 0) -> CapturedProgram | Finding:
        which = f"capture {number} " if self.shared else "capture "
        inputs = make_inputs(self.program, self.seed, self.device)
        try:
            with bounds.bounded(f"the warm-up and {which}of the program"):
                captured = CapturedProgram(
                    self.program, self.table, self.target, inputs, self.seed, self.kind, pool=pool
                )
        except bounds.Hang as hang:
            return self.finding("hang", hang.words(), cause=HUNG)
        except Exception as error:
            return self.finding(
                "exception", f"{which}raised {describe(error)}", cause=raised_cause(error)
            )
        capture_steps = [step for step, _ in captured.capture_log]
        if capture_steps != self.break_steps:
            return self.finding(
                "break-count",
                f"{which}called break steps {capture_steps}, expected {self.break_steps}",
                cause=calls_cause(capture_steps, self.break_steps),
            )
        return captured

    def replays(
        self, captures: list[CapturedProgram], order: Sequence[int], first: int
    ) -> Finding | None:
        """Replays ``captures[i]`` for each ``i`` of ``order``, numbered from ``first``."""
        program, table = self.program, self.table
        for number, which in enumerate(order, start=first):
            captured, self.replaying = captures[which], which
            replay_seed = self.seed + 1 + number
            if number == 0:
                fresh, expected, left = self.first_inputs, self.first_expected, self.first_left
            else:
                fresh = make_inputs(program, replay_seed, self.device)
                expected = run_eager(program, table, fresh, replay_seed, self.kind)
                left = state_left()
            try:
                with bounds.bounded(f"replay {number} of the program"):
                    log = captured.replay(fresh, replay_seed)
                left_by_replay = state_left()
            except bounds.Hang as hang:
                return self.finding("hang", hang.words(), number, cause=HUNG)
            except Exception as error:
                if captured.foreign:
                    message = foreign_message(captured.foreign)
                    return self.finding("break-count", message, number, cause=FOREIGN_CALLS)
                if refused(error, captured.alias_switched, program, table):
                    self.refused = True
                    return None
                # A break handed another type than at capture fails in its own code: the
                # cause is the handing, which names the bug where the exception would name
                # the op.
                handed = self._handed(captured, captured.replayed_log, number)
                if handed is not None:
                    return handed
                other_state = _ambient_changed(captured, program)
                if other_state is not None:
                    return self.finding("break-ambient", other_state[0], number, cause=AMBIENT)
                return self.finding(
                    "exception",
                    f"replay raised {describe(error)}",
                    number,
                    cause=raised_cause(error),
                )
            if captured.foreign:
                message = foreign_message(captured.foreign)
                return self.finding("break-count", message, number, cause=FOREIGN_CALLS)
            broken = check_breaks(log, self.break_steps)
            if broken is not None:
                cause = calls_cause([s for s, _ in log], self.break_steps)
                return self.finding(broken[0], broken[1], number, broken[2], cause)  # type: ignore[arg-type]
            handed = self._handed(captured, log, number)
            if handed is not None:
                return handed
            other_state = _ambient_changed(captured, program)
            if other_state is not None:
                return self.finding("break-ambient", other_state[0], number, cause=AMBIENT)
            changed_left = left_otherwise(left_by_replay, left)
            if changed_left is not None:
                return self.finding("state-left", changed_left, number, cause=STATE_LEFT)
            differing = [
                (index, problem)
                for index, (actual, want) in enumerate(zip(captured.outputs, expected))
                if (problem := compare(actual, want, self.tol)) is not None
            ]
            if differing:
                return self.mismatch(captured, fresh, replay_seed, number, differing)
        return None

    def _handed(
        self, captured: CapturedProgram, log: Sequence[BreakEntry], number: int
    ) -> Finding | None:
        """A break a replay handed other types or layouts than the capture did: a tensor in
        another layout names that rather than the view bits or type its copy lost."""
        changed = _types_changed(captured, self.program)
        moved = layout_changed(log, captured.capture_log, self.program)
        if changed is not None and (moved is None or changed[1] != TENSOR_REBUILT):
            return self.finding("break-arg-types", changed[0], number, cause=changed[1])
        if moved is not None:
            problem, step = moved
            return self.finding("break-args", str(problem), number, step, problem.cause)
        return None

    def mismatch(
        self,
        captured: CapturedProgram,
        fresh: list[torch.Tensor],
        replay_seed: int,
        number: int,
        differing: list[tuple[int, str]],
    ) -> Finding:
        """The finding of replay ``number``'s outputs that differ from eager, explained by the
        first place the replay parts from eager: the replay is run again with the break log
        keeping every call's arguments and result, beside eager runs that do the same."""
        index, problem = differing[0]
        what = f"output {index} (value {self.program.outputs[index]})"
        replayed = Recorder(captured.log.owned)
        captured.log.recorder = replayed
        try:
            with bounds.bounded(f"replay {number} of the program, again to explain it"):
                captured.replay(fresh, replay_seed)
        except (Exception, bounds.Hang):  # the replay does not run twice: the values alone tell
            parting = None
        else:
            parting = parting_of(
                self.program, self.table, replayed, fresh, replay_seed, self.seed, self.kind,
                differing, self.tol,
            )  # fmt: skip
        finally:
            captured.log.recorder = None
        switched = sorted(captured.alias_switched)
        if switched and (parting is None or parting.cause.involves == "a graph segment"):
            # No break call differs, yet an output does: where a break returned its argument
            # at capture and a new tensor at replay, the target wrote that new result where
            # the capture's result lay, which is the argument's memory.
            step = switched[0]
            return self.finding(
                "mismatch",
                f"break step {step} ({self.program.steps[step].op}) returned its argument "
                "itself at capture and a new tensor at replay, and the replay wrote the new "
                f"result into the memory the capture's result shared with that argument; "
                f"then {what} differs: {problem}",
                number,
                index,
                SWITCHED_RESULT,
            )
        if parting is None:
            return self.finding("mismatch", f"{what}: {problem}", number, index)
        if parting.cause.involves == "a graph segment":
            message = f"{parting.words} ({what})"
        else:
            message = f"{parting.words}; then {what} differs: {problem}"
        return self.finding("mismatch", message, number, index, parting.cause)
