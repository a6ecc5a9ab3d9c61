"""Runs a generated program under a target the way every property needs it.

:class:`ProgramRun` allocates static inputs (or takes the views it is given), warms up eagerly
on a stream of its runner, as an engine's runner does, and captures once there, on a stream
it is given, or from the default stream (:data:`CAPTURE_STREAMS`), optionally into a given
pool, with extra capture keywords, with a hook called before each step inside the capture,
and with break functions wrapped;
:meth:`ProgramRun.replay_problem` replays on fresh inputs, on the replay stream it was told,
and compares with eager. After every capture and replay the caller's current stream must be
the one it was (:func:`stream_left`). Memory helpers read reserved memory, and graph-pool
memory, the same way on GPU and simulator.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from verification import bounds, breadcrumbs
from verification.causes import Problem, cause_of
from verification.devices import DeviceKind
from verification.divergence import (
    AMBIENT,
    FOREIGN_CALLS,
    TENSOR_REBUILT,
    Recorder,
    calls_cause,
    handed_cause,
)
from verification.execute import (
    OWNED,
    BreakEntry,
    BreakLog,
    called_otherwise,
    called_otherwise_message,
    collector_paused,
    foreign_message,
    handed_otherwise,
    handed_otherwise_message,
    replaying,
    run_eager,
    run_steps,
    seed_rng,
    step_callables,
)
from verification.ops.ambient import ambient_seen
from verification.ops.spec import OpSpec
from verification.oracle import compare, layout_changed, parting_of, program_tolerance
from verification.programs import Program, make_inputs, op_table
from verification.targets import Target
from verification.targets.contracts import SIDE_STREAM

Hook = Callable[[int, dict[int, torch.Tensor]], None]
Wrap = Callable[[Callable[..., Any]], Callable[..., Any]]
DEFAULT_POOL = (0, 0)
# Where a capture runs: on the runner's own stream, on a second stream it is given
# (``stream=`` where the target takes it, else made current around the capture), or wherever
# the target puts it when its caller is on the default stream, as a script's is (CUDA refuses
# to capture there, so the target picks a stream, which must wait for the default one).
CAPTURE_STREAMS = ("runner", "given", "default")
# Where replays run: the default stream, the runner's stream, or a stream of neither.
REPLAY_STREAMS = ("default", "runner", "other")


def capture_streams(target: Target) -> tuple[str, ...]:
    """The :data:`CAPTURE_STREAMS` to draw for ``target``: never the default stream for one
    whose engine's runner only captures from a stream of its own."""
    if SIDE_STREAM in target.caller_duties:
        return tuple(s for s in CAPTURE_STREAMS if s != "default")
    return CAPTURE_STREAMS


def stream_left(before: torch.cuda.Stream, what: str) -> str | None:
    """Why the caller's current stream is not ``before`` after ``what``, or None; puts
    ``before`` back, so that the harness goes on where its caller stood."""
    now = torch.cuda.current_stream()
    if now == before:
        return None
    torch.cuda.set_stream(before)
    default = torch.cuda.default_stream()
    names = ["the default stream" if s == default else "a side stream" for s in (before, now)]
    return (
        f"{what} left the caller's current stream changed: {names[0]} before, "
        f"{'another ' if names[0] == names[1] else ''}{names[1]} after"
    )


def takes_stream(target: Target) -> bool:
    """Whether the target's capture takes the stream to capture on (``stream=``)."""
    try:
        return "stream" in inspect.signature(target.BreakableCUDAGraphCapture).parameters
    except (TypeError, ValueError):
        return False


@dataclass(frozen=True)
class CapturePlace:
    """Where a capture of :data:`CAPTURE_STREAMS` runs, for a runner working on a stream of
    its own: ``stream`` is the one the capture is entered on (None: the runner's), ``kwargs``
    what the target's capture is given for it, ``around`` the stream made current around it."""

    stream: torch.cuda.Stream | None
    kwargs: dict[str, Any]
    around: Any

    def enter(self, runner: torch.cuda.Stream) -> None:
        """Orders the capture's stream after the runner's work (its writes of the inputs)."""
        if self.stream is not None:
            self.stream.wait_stream(runner)

    def leave(self, runner: torch.cuda.Stream) -> None:
        """Orders the runner's stream after the capture's."""
        if self.stream is not None:
            runner.wait_stream(self.stream)


def capture_place(capture_stream: str, target: Target) -> CapturePlace:
    """The :class:`CapturePlace` of ``capture_stream`` (of :data:`CAPTURE_STREAMS`)."""
    if capture_stream == "given":
        given = torch.cuda.Stream()
        if takes_stream(target):
            return CapturePlace(given, {"stream": given}, contextlib.nullcontext())
        return CapturePlace(given, {}, torch.cuda.stream(given))
    if capture_stream == "default":  # the target picks the stream, which must wait for it
        default = torch.cuda.default_stream()
        return CapturePlace(default, {}, torch.cuda.stream(default))
    return CapturePlace(None, {}, contextlib.nullcontext())


def _marked(decorated: Callable[..., Any], fn: Callable[..., Any]) -> Callable[..., Any]:
    """The target's decorated break of ``fn``, called under a breadcrumb naming ``fn`` (a
    lambda by where it is defined)."""
    inner = inspect.unwrap(fn)
    name = getattr(inner, "__name__", "break")
    code = getattr(inner, "__code__", None)
    if name == "<lambda>" and code is not None:
        name = f"the lambda at {code.co_filename}:{code.co_firstlineno}"
    call = f"decorated break {name}"

    def marked(*args: Any, **kwargs: Any) -> Any:
        with breadcrumbs.calling(call):
            return decorated(*args, **kwargs)

    return marked


class ProgramRun:
    """``program`` captured once by ``target`` on static inputs, ready to replay."""

    def __init__(
        self,
        program: Program,
        target: Target,
        kind: DeviceKind,
        device: str,
        seed: int,
        *,
        pool: Any = None,
        capture_kwargs: Mapping[str, Any] | None = None,
        hook: Hook | None = None,
        wrap: Wrap | None = None,
        ops: Sequence[OpSpec] | None = None,
        reseed: bool = True,
        inputs: Sequence[torch.Tensor] | None = None,
        static_inputs: Sequence[torch.Tensor] | None = None,
        capture_stream: str = "runner",
        replay_stream: str = "default",
        streams: list[torch.cuda.Stream] | None = None,
        construct: Callable[[Callable[[], Any]], Any] | None = None,
    ) -> None:
        """``streams``, if given, gets every stream the run makes, as it makes them: a check
        asks them whether a capture was left open there, even where this constructor raised.
        ``construct``, if given, is handed the call that builds the capture and returns what
        it built: it may make that call elsewhere (in another thread, as a runner built
        before its capturing threads does)."""
        self.program = program
        self.table = op_table(ops)
        self.kind = kind
        self.device = device
        self.seed = seed
        # Seeding touches the process's generators, which another thread's capture forbids.
        self._seed = (lambda s: seed_rng(s, kind)) if reseed else (lambda s: None)
        self.log = BreakLog()
        wrap = wrap or (lambda fn: fn)
        decorate = target.eager_break_during_capture
        self.callables = step_callables(
            program, self.table, lambda fn: _marked(decorate(wrap(fn)), fn), self.log
        )
        # ``inputs``: the values, made by the caller beforehand (a thread check makes them
        # before its threads start: on the H200 a copy to the device in one thread while
        # another ended its capture crashed torch by SIGSEGV).
        values = make_inputs(program, seed, device) if inputs is None else inputs
        if static_inputs is None:
            self.static_inputs = [x.clone() for x in values]
        else:  # views of an engine's static buffers: the values go into them
            self.static_inputs = list(static_inputs)
            for static, value in zip(self.static_inputs, values):
                static.copy_(value)
        kwargs = dict(capture_kwargs or {})
        if pool is not None:
            kwargs["pool"] = pool
        self.capture: Any = None
        self.outputs: list[torch.Tensor] = []
        # Why the caller's stream was left changed, found at capture; every replay reports it.
        self.problem: str | None = None
        # What the caller of the capture and of the last replay had set (ambient_seen()).
        self.capture_caller: Any = ()
        self.replay_caller: Any = ()
        caller = torch.cuda.current_stream()
        runner = torch.cuda.Stream()
        runner.wait_stream(caller)
        place = capture_place(capture_stream, target)
        kwargs.update(place.kwargs)
        if streams is not None:
            streams += [runner] if capture_stream != "given" else [runner, place.stream]
        self.replay_stream = {
            "default": torch.cuda.default_stream(),
            "runner": runner,
            "other": torch.cuda.Stream(),
        }[replay_stream]
        try:
            with torch.cuda.stream(runner):
                self._seed(seed)
                run_steps(program, self.table, self.callables, self.static_inputs)
                self.log.clear()  # the warm-up's calls
                place.enter(runner)
                with place.around:
                    with bounds.bounded("BreakableCUDAGraphCapture()"):
                        make = functools.partial(target.BreakableCUDAGraphCapture, **kwargs)
                        self.capture = make() if construct is None else construct(make)
                    self._seed(seed)
                    before = torch.cuda.current_stream()
                    self.capture_caller = ambient_seen()
                    with bounds.bounded("the capture of the program"):
                        with collector_paused(), self.capture:
                            self.outputs = run_steps(
                                program, self.table, self.callables, self.static_inputs, hook
                            )
                    self.problem = stream_left(before, "the capture")
                place.leave(runner)
        finally:
            caller.wait_stream(runner)
        self.capture_log = self.log.take()
        self.capture_structures = self.log.take_structures()
        self.capture_seen = self.log.take_seen()

    def replay(self) -> str | None:
        """One replay on the replay stream, ordered after the caller's work and before what the
        caller does next; why the caller's stream was left changed, or None."""
        stream = self.replay_stream
        caller = torch.cuda.current_stream()
        stream.wait_stream(caller)
        with torch.cuda.stream(stream):
            before = torch.cuda.current_stream()
            self.replay_caller = ambient_seen()
            with bounds.bounded("replay()"), replaying(self.log):
                self.capture.replay()
            problem = stream_left(before, "replay()")
        caller.wait_stream(stream)
        return problem

    def replay_problem(self, replay_seed: int) -> str | None:
        """Replays on the inputs of ``replay_seed``; why it differs from eager, or None."""
        fresh = make_inputs(self.program, replay_seed, self.device)
        expected = run_eager(self.program, self.table, fresh, replay_seed, self.kind)
        for static, value in zip(self.static_inputs, fresh):
            static.copy_(value)
        self.log.clear()  # calls of an earlier replay that raised midway
        self._seed(replay_seed)
        try:
            left = self.problem or self.replay()
        except Exception:
            foreign = self.log.take_foreign()
            if foreign:
                return Problem(foreign_message(foreign), FOREIGN_CALLS)
            # A break handed another type than at capture fails in its own code: the cause
            # is the handing, which names the bug where the exception would name the op.
            handed = self._handed(self.log.take())
            if handed is None:
                raise
            return handed
        if left is not None:
            return left
        torch.cuda.synchronize()
        foreign = self.log.take_foreign()
        if foreign:
            return Problem(foreign_message(foreign), FOREIGN_CALLS)
        entries = self.log.take()
        calls = [step for step, _ in entries]
        breaks = [i for i, s in enumerate(self.program.steps) if s.brk]
        if calls != breaks:
            return Problem(
                f"replay called break steps {calls}, expected {breaks}", calls_cause(calls, breaks)
            )
        handed = self._handed(entries)
        if handed is not None:
            return handed
        tol = program_tolerance(self.program, self.table)
        differing = [
            (index, problem)
            for index, (actual, want) in enumerate(zip(self.outputs, expected))
            if (problem := compare(actual, want, tol)) is not None
        ]
        if not differing:
            return None
        index, problem = differing[0]
        parting = replay_parting(self, fresh, replay_seed, differing)
        if parting is None:
            return f"output {index}: {problem}"
        if parting.cause.involves == "a graph segment":
            return Problem(parting.words, parting.cause)
        return Problem(f"{parting.words}; then output {index} differs: {problem}", parting.cause)

    def _handed(self, entries: list[BreakEntry]) -> str | None:
        """Other types, layouts or ambient state a replay handed a break than the capture did;
        a tensor in another layout names that rather than the view bits its copy lost."""
        handed, moved = self._handed_otherwise(), self._handed_layout(entries)
        if moved is not None and (handed is None or cause_of(handed) == TENSOR_REBUILT):
            return moved
        return handed

    def _handed_layout(self, entries: list[BreakEntry]) -> str | None:
        moved = layout_changed(entries, self.capture_log, self.program)
        return None if moved is None else moved[0]

    def _handed_otherwise(self) -> str | None:
        changed = handed_otherwise(self.log.take_structures(), self.capture_structures)
        if changed is not None:
            return Problem(
                handed_otherwise_message(changed, self.program),
                handed_cause(changed[2], changed[1], OWNED),
            )
        other_state = called_otherwise(
            self.log.take_seen(), self.capture_seen, self.capture_caller, self.replay_caller
        )
        if other_state is None:
            return None
        return Problem(called_otherwise_message(other_state, self.program), AMBIENT)

    def drop(self) -> None:
        """Releases the capture (``reset()`` where the target has it) and every tensor."""
        reset = getattr(self.capture, "reset", None)
        if callable(reset):
            reset()
        self.capture = None
        self.outputs = []
        self.static_inputs = []
        self.callables = []


def replay_parting(
    run: ProgramRun, fresh: list[torch.Tensor], replay_seed: int, differing: list[tuple[int, str]]
) -> Any:
    """Where ``run``'s replay on ``fresh`` first parts from eager (a
    :class:`~verification.divergence.Parting`, or None): the replay is made again with the
    break log keeping every call's arguments and result (:mod:`verification.divergence`)."""
    for static, value in zip(run.static_inputs, fresh):
        static.copy_(value)
    run.log.clear()
    replayed = Recorder(run.log.owned)
    run.log.recorder = replayed
    run._seed(replay_seed)
    try:
        if run.replay() is not None:
            return None
        torch.cuda.synchronize()
    except (Exception, bounds.Hang):  # the replay does not run twice: the values alone tell
        return None
    finally:
        run.log.recorder = None
        run.log.clear()
    return parting_of(
        run.program, run.table, replayed, fresh, replay_seed, run.seed, run.kind,
        differing, program_tolerance(run.program, run.table),
    )  # fmt: skip


def settle(kind: DeviceKind) -> None:
    """Frees what can be freed: collect, synchronize, empty the allocator's cache."""
    import gc

    gc.collect()
    torch.cuda.synchronize()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if kind == "cuda" and clear is not None:
        clear()  # cuBLAS keeps a workspace per stream in the caching allocator
    torch.cuda.empty_cache()


def reserved() -> int:
    return int(torch.cuda.memory_reserved())


def graph_pool_bytes() -> int:
    """Bytes reserved in graph pools (every pool but the default one)."""
    return sum(
        int(segment["total_size"])
        for segment in torch.cuda.memory_snapshot()
        if tuple(segment.get("segment_pool_id") or DEFAULT_POOL) != DEFAULT_POOL
    )


def pool_of(tensor: torch.Tensor) -> tuple[int, int] | None:
    """The graph pool ``tensor``'s memory lies in, or None (the default pool)."""
    address = tensor.untyped_storage().data_ptr()
    for segment in torch.cuda.memory_snapshot():
        pool = tuple(segment.get("segment_pool_id") or DEFAULT_POOL)
        if pool != DEFAULT_POOL and segment["address"] <= address < segment["address"] + int(
            segment["total_size"]
        ):
            return pool  # type: ignore[return-value]
    return None


def in_graph_pool(tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s memory lies in a graph pool (it was made inside a capture)."""
    return pool_of(tensor) is not None
