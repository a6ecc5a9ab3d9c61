"""Property 5, stream order: eager steps are ordered with the graph segments around them.

An implementation that runs eager steps on a stream the caller's stream never waits for, or
drops a join, must fail every time, not once in a thousand runs. On the simulator every
replay runs under its happens-before race detector, which names both unordered accesses. On
a GPU the fixed scenarios hold the writer back on the device (:class:`WriterHold`: sleep
kernels in front of the write, with events the reader asks) and judge a trial only when its
reader was issued while the hold still had half of it to run: a reader not ordered after the
write then reads the old value, whatever the host's speed; a trial the host was too slow for is
run again with a longer hold. The witness break also sleeps between reading its input and
writing its output (its output lands late), on large tensors. Each drawn
program is captured as a drawn capture set (:mod:`.capture_set`): on the runner's stream, a
stream it is given or from the default stream, replayed on the default stream, the runner's or
another, so a chain replayed on a stream other than its capture's must stay ordered on the one
it replays on; after every capture and replay the caller's current stream must be the one it
was. From the default stream, where the target picks its capture stream, fixed scenarios
(:data:`FROM_DEFAULT_STREAM`) also capture, run the runner and the capture set, and read a
break's capture-time run, except for targets whose engine's runner never captures from there.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import torch
from hypothesis import strategies as st

from verification import breadcrumbs
from verification.causes import describe, within
from verification.devices import DeviceKind
from verification.execute import collector_paused
from verification.findings import Finding
from verification.programs import Program
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
from verification.properties.runner import runner_class
from verification.properties.runs import ProgramRun, capture_streams, stream_left
from verification.search import symptom

NAME = "stream-order"
# About 10 ms on an H200: far longer than Python takes to issue the next kernel.
SLEEP_CYCLES = 20_000_000
WITNESS_ELEMENTS = 1 << 22
REPLAYS = 3
# Trials of a held scenario whose hold ran out before the reader came (a loaded host), each
# hold four times the last: 10 ms, then 40, 160 and 640 ms a half on an H200.
HOLD_TRIES = 4


class HoldLapsed(Exception):
    """Every trial's reader came after its hold was half over: the device held the write
    back for less time than the host took to issue the read, so the trials say nothing."""


class WriterHold:
    """Holds back the work issued next on the current stream, on the device: two sleep
    kernels in front of it, an event after each. The reader calls :meth:`reading` right before
    it reads. A trial is judged only when the first sleep was still running then: at least one
    whole sleep (5 ms and more) lay between the reader's launch and the write, so a reader not
    ordered after the write, its stream idle, ran first and read the old value; no host timing
    decides the verdict. On the simulator nothing is held (its race detector sees any missing
    order) and every trial is judged."""

    def __init__(self, kind: DeviceKind, cycles: int = SLEEP_CYCLES) -> None:
        self.kind = kind
        self.cycles = cycles
        self._half: Any = None
        self.lapsed = False

    def start(self) -> None:
        """Puts the hold in front of whatever the current stream runs next."""
        self.lapsed = False
        if self.kind != "cuda":
            return
        torch.cuda._sleep(self.cycles)
        self._half = torch.cuda.Event()
        self._half.record()
        torch.cuda._sleep(self.cycles)

    def reading(self) -> None:
        """Notes whether the hold is half over as the reader is about to read. Not asked
        while the reader's stream captures, where CUDA forbids an event query."""
        if self._half is None or torch.cuda.is_current_stream_capturing():
            return
        if self._half.query():
            self.lapsed = True


def held_trials(kind: DeviceKind, trial: Any) -> str | None:
    """``trial(hold)``'s problem from its first judged run: one whose reader came while
    ``hold`` still held the writer back, or one that found a problem (a stale read is stale
    whenever the reader came); a run that saw nothing and was not judged is tried again with
    a hold four times as long. Raises :class:`HoldLapsed` when no run could be judged."""
    cycles = SLEEP_CYCLES
    for _ in range(HOLD_TRIES):
        hold = WriterHold(kind, cycles)
        problem = trial(hold)
        if problem is not None or not hold.lapsed:
            return problem
        cycles *= 4
    raise HoldLapsed(
        f"in {HOLD_TRIES} trials, holds up to {cycles // 4} cycles a half, the host issued "
        "the read only after the writer's hold was half over: the device is too fast or the "
        "host too slow for this check (or something synchronized the host with the writer)"
    )


class RaceDetectorMissing(Exception):
    """The simulator in use has no race detector, so the property cannot be judged on it."""


@contextlib.contextmanager
def race_detection(kind: DeviceKind) -> Iterator[type[BaseException] | None]:
    """On the simulator, detects races in the block and yields the error type it raises."""
    if kind == "cuda":
        yield None
        return
    import verification.sim as sim

    detect = getattr(sim, "detect_races", None)
    if detect is None:
        raise RaceDetectorMissing("this simulator has no stream race detector")
    with detect():
        yield sim.StreamRaceError


def _sleep(kind: DeviceKind, cycles: int = SLEEP_CYCLES) -> None:
    if kind == "cuda":
        torch.cuda._sleep(cycles)


def witness_problem(config: CheckConfig) -> str | None:
    """A graph feeding a break feeding a graph, amplified so that any missing order shows,
    captured from a side stream of the caller's, as an engine's runner captures."""
    return _witness(config, torch.cuda.Stream())


def default_stream_witness_problem(config: CheckConfig) -> str | None:
    """The witness captured with its caller on the default stream, as a script's is: CUDA
    refuses to capture there, so the target picks the capture stream, which must wait for the
    default stream's writes (the witness's inputs) and be waited for when the capture ends."""
    return _witness(config, torch.cuda.default_stream())


def _elements(kind: str) -> int:
    """The witness tensors' length: large on a GPU, so a missing order shows; small on the
    simulator, whose race detector sees any."""
    return WITNESS_ELEMENTS if kind == "cuda" else 256


def _late_writer(config: CheckConfig, judged: list[WriterHold] | None = None) -> Any:
    """The witness's break: reads what a graph made and writes late what the next one reads;
    ``judged``, while it holds a hold, hears from the break when it reads."""
    kind = config.kind

    @config.target.eager_break_during_capture
    def late_writer(h: torch.Tensor, out: torch.Tensor) -> None:
        if judged:
            judged[-1].reading()
        fresh = h + 1  # reads the graph's output: stale unless ordered after it
        _sleep(kind, 2 * SLEEP_CYCLES)
        out.copy_(fresh)  # lands late: the next graph reads stale data unless joined

    return late_writer


def _witness(config: CheckConfig, side: torch.cuda.Stream) -> str | None:
    target, kind, device = config.target, config.kind, config.device
    elements = _elements(kind)
    judged: list[WriterHold] = []
    late_writer = _late_writer(config, judged)
    x = torch.zeros(elements, device=device)
    out = torch.zeros(elements, device=device)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        h = x * 2
        late_writer(h, out)
        capture = target.BreakableCUDAGraphCapture()
        with breadcrumbs.calling("the witness's capture"), collector_paused(), capture:
            _sleep(kind)
            h = x * 2
            with breadcrumbs.calling("decorated break late_writer()"):
                late_writer(h, out)
            y = out * 3
        left = stream_left(side, "the capture")
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    if left is not None:
        return left
    for replay, value in enumerate((1.0, -2.0, 3.0)[:REPLAYS]):

        def trial(hold: WriterHold, replay: int = replay, value: float = value) -> str | None:
            # The replay's graphs wait behind the hold: the break reads their output while
            # they are still held back unless it is ordered after them.
            x.fill_(value)
            before = torch.cuda.current_stream()
            judged[:] = [hold]
            try:
                hold.start()
                with breadcrumbs.calling("replay()"):
                    capture.replay()
            finally:
                judged.clear()
            left = stream_left(before, "replay()")
            if left is not None:
                return left
            torch.cuda.synchronize()
            if not torch.equal(y, torch.full_like(y, (2 * value + 1) * 3)):
                return f"replay {replay} of a graph-break-graph chain read stale data: the eager step is not ordered with the graphs"
            return None

        problem = held_trials(kind, trial)
        if problem is not None:
            return problem
    return None


def _amplified_problem(
    program: Program, capture_set: CaptureSet | None, config: CheckConfig
) -> str | None:
    def hook(index: int, env: dict[int, torch.Tensor]) -> None:
        if index < len(program.steps) and program.steps[index].brk:
            _sleep(config.kind)

    run = ProgramRun(program, config.target, config.kind, config.device, config.seed, hook=hook)
    for replay in range(REPLAYS):
        problem = run.replay_problem(config.seed + 1 + replay)
        if problem is not None:
            return within(f"replay {replay}: ", problem)
    run.drop()
    if capture_set is None:
        return None
    return capture_set_problem(program, capture_set, config, hook=hook)


def _key(finding: Finding) -> tuple[str, str, str]:
    """One symptom per cause: every stream race is one (the detector's words name the ops and
    the memory, which differ from program to program for one missing join), and the witness's
    finding and a drawn program's are one when they say the same after where they were seen."""
    message = re.sub(r"^(witness|replay \d+): ", "", finding.message)
    return (
        finding.check,
        finding.kind,
        ("stream race" if "stream race" in message else symptom(message)),
    )


def _judged(config: CheckConfig, problem_of: Any, *args: Any) -> str | None:
    """``problem_of(*args, config)`` under race detection; a detected race is the problem, and
    so is the target raising (as the fuzzer's oracle counts it), rather than a crashed check."""
    with race_detection(config.kind) as race_error:
        try:
            return problem_of(*args, config)
        except (RaceDetectorMissing, HoldLapsed):
            raise
        except Exception as error:
            # A race the target's own cleanup then masked (an assert in its __exit__) is
            # still the cause: it is found in the exception's context.
            cause: BaseException | None = error
            while race_error is not None and cause is not None:
                if isinstance(cause, race_error):
                    return f"stream race: {cause}"
                cause = cause.__cause__ or cause.__context__
            return f"the target raised {describe(error)}"


def example(program: Program, scenario: dict[str, Any], config: CheckConfig) -> str | None:
    """Re-checks one finding's program (a reproducer calls this)."""
    capture_set = from_data(scenario.get("capture_set"))
    return (
        _judged(config, witness_problem)
        or _default_witness(config)
        or _judged(config, _amplified_problem, program, capture_set)
    )


def capture_time_read_problem(config: CheckConfig) -> str | None:
    """A break at capture reads what its caller wrote on the default stream just before the
    capture (the write held back on the device, :class:`WriterHold`) and keeps it, as an
    engine's break writes its KV cache at capture: its capture-time run must see that write,
    so the capture's stream must wait for the default one. Replays alone cannot show this on
    a GPU. Nothing between the write and the read allocates (a ``cudaMalloc`` may wait for the
    device, which would let the write land first)."""
    elements = _elements(config.kind)

    def trial(hold: WriterHold) -> str | None:
        @config.target.eager_break_during_capture
        def keep(x: torch.Tensor, kept: torch.Tensor) -> None:
            hold.reading()
            kept.copy_(x)

        with torch.cuda.stream(torch.cuda.default_stream()):
            x = torch.zeros(elements, device=config.device)
            kept = torch.zeros(elements, device=config.device)
            scratch = torch.zeros(elements, device=config.device)
            torch.cuda.synchronize()
            hold.start()
            x.fill_(5.0)
            capture = config.target.BreakableCUDAGraphCapture()
            with collector_paused(), capture:
                # A graph before the break, as breaks sit between graphs.
                torch.mul(x, 2, out=scratch)
                keep(x, kept)  # at capture the break runs for real, on the caller's input
                torch.mul(kept, 2, out=scratch)
        torch.cuda.synchronize()
        if not torch.equal(kept, torch.full_like(kept, 5.0)):
            return (
                "a break at capture read its input before the caller's write on the default "
                "stream landed: the capture's stream does not wait for its caller's"
            )
        return None

    return held_trials(config.kind, trial)


def runner_from_default_stream_problem(config: CheckConfig) -> str | None:
    """The witness's chain through the target's runner, called from the default stream after
    the caller wrote its input there: every call must order the runner's streams after the
    caller's work and its result before the caller's next read."""
    runner = runner_class(config)
    if runner is None:
        return None
    late_writer = _late_writer(config)
    elements = _elements(config.kind)

    def chain(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        late_writer(x * 2, out)
        return out * 3

    with torch.cuda.stream(torch.cuda.default_stream()):
        x = torch.zeros(elements, device=config.device)
        out = torch.zeros(elements, device=config.device)
        chained = runner(chain)
        for call, value in enumerate((1.0, -2.0, 3.0, -4.0)):
            x.fill_(value)
            with collector_paused():
                y = chained(x, out)
            if not torch.equal(y, torch.full_like(y, (2 * value + 1) * 3)):
                return f"call {call} of the runner from the default stream read stale data"
    return None


def capture_set_from_default_stream_problem(config: CheckConfig) -> str | None:
    """The witness's chain through the target's capture set (sizes 4 and 2), made and called
    from the default stream after the caller wrote its batch there."""
    capture_set = config.target.capture_set
    if capture_set is None:
        return None
    late_writer = _late_writer(config)
    width = 1024 if config.kind == "cuda" else 8

    def chain(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        late_writer(x * 2, out)
        return out * 3

    with torch.cuda.stream(torch.cuda.default_stream()):
        example = torch.zeros(1, width, device=config.device)
        with collector_paused():
            made = capture_set(chain, (4, 2), (example,))
        for batch, value in ((2, 1.0), (3, -2.0), (4, 3.0), (1, -4.0)):
            x = torch.full((batch, width), value, device=config.device)
            with collector_paused():
                y = made(x)
            if not torch.equal(y, torch.full_like(x, (2 * value + 1) * 3)):
                return f"a call at batch {batch} of a capture set from the default stream read stale data"
    return None


# What a script's caller does from the default stream, which an engine's runner never does.
FROM_DEFAULT_STREAM = (
    ("capture from the default stream", capture_time_read_problem),
    ("witness from the default stream", default_stream_witness_problem),
    ("runner from the default stream", runner_from_default_stream_problem),
    ("capture set from the default stream", capture_set_from_default_stream_problem),
)


def _default_witness(config: CheckConfig) -> str | None:
    """The first problem of :data:`FROM_DEFAULT_STREAM`, for a target whose engine may
    capture from the default stream."""
    if "default" not in capture_streams(config.target):
        return None
    for label, scenario in FROM_DEFAULT_STREAM:
        problem = _judged(config, scenario)
        if problem is not None:
            return within(f"{label}: ", problem)
    return None


def _finding(problem: str | None) -> Finding | None:
    return None if problem is None else property_finding(NAME, "target-bug", problem)


def check(config: CheckConfig) -> CheckResult:
    def run() -> tuple[int, list[Finding]]:
        found = Findings(NAME, config)
        try:
            problem = _judged(config, witness_problem)
        except RaceDetectorMissing as missing:
            return 0, [property_finding(NAME, "harness-error", str(missing))]
        except HoldLapsed as lapsed:
            return 1, [property_finding(NAME, "harness-error", f"witness: {lapsed}")]
        found.examples += 1
        if problem is not None:
            found.add(property_finding(NAME, "target-bug", within("witness: ", problem)))
        if found.going:
            found.examples += 1
            try:
                found.add(_finding(_default_witness(config)))
            except HoldLapsed as lapsed:
                found.add(
                    property_finding(NAME, "harness-error", f"from the default stream: {lapsed}")
                )

        def body(drawn: tuple[Program, CaptureSet]) -> Finding | None:
            program, capture_set = drawn
            if not program.num_breaks:
                return None
            problem = _judged(config, _amplified_problem, program, capture_set)
            if problem is None:
                return None
            scenario = (("capture_set", capture_set.as_data()),)
            return property_finding(NAME, "target-bug", problem, program, config.seed, scenario)

        programs = program_strategy(config).filter(lambda p: p.num_breaks > 0)
        strategy = st.tuples(programs, capture_sets(2, capture_streams(config.target)))
        found.search(strategy, body, max(1, config.examples // 2), key=_key)
        return found.result()

    return timed(NAME, run)
