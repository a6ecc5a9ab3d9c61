"""The ``threads`` property's lifetime dimension: which thread does each event of one capture
object's life, as engines hand captures between threads (vLLM builds its runners, and their
captures, before the threads that capture them exist; a runner may replay from another thread).

A :class:`Lifetime` is plain data that hypothesis draws, shrinks and a reproducer prints: the
object is built in thread X, then captured, replayed (one replay at a time, each in the thread
drawn for it) and reset in X or Y. Each event runs to its end before the next begins, and
``current()`` (and ``is_active()`` where the target has it) is asked in both threads after
the build, inside the open capture and after every event. No contract of
:mod:`verification.targets.contracts` lets a target refuse any of this: "one capturing thread at
a time" limits how many threads capture at once, never which thread builds, enters, replays
or resets an object, and a lifetime has one capture open at a time. So every refusal, wrong
replay, or capture left visible in a thread is a bug.
"""

from __future__ import annotations

import queue
import re
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from hypothesis import strategies as st

from verification import breadcrumbs
from verification.causes import Cause, Problem, describe, within
from verification.programs import Program, make_inputs
from verification.properties.runs import ProgramRun
from verification.usable import LEFT_ACTIVE, LEFT_CAPTURING

# How long the checker waits for one event in a thread before calling it stuck.
WAIT_S = 60.0
# The two threads a lifetime's events run in; the object is always built in the first.
THREADS = ("X", "Y")
SHOWN_CAPTURE = Cause("thread-shown-capture")


def left_active(target: Any, thread: str) -> str | None:
    """What a finished capture left in this thread (called ``thread`` in the words), or None."""
    if target.BreakableCUDAGraphCapture.current() is not None:
        return Problem(f"a capture is still active in {thread}", LEFT_ACTIVE)
    if torch.cuda.is_current_stream_capturing():
        return Problem(f"{thread}'s stream is still capturing", LEFT_CAPTURING)
    return None


@dataclass(frozen=True)
class Lifetime:
    """The thread (of :data:`THREADS`) of each event: ``build`` (the constructor), ``capture``
    (enter, the program, exit), each of ``replays`` in turn, then ``reset``."""

    build: str = "X"
    capture: str = "X"
    replays: tuple[str, ...] = ("X",)
    reset: str = "X"

    def as_data(self) -> dict[str, Any]:
        """The lifetime as a dict of plain values, which a reproducer prints and reads back."""
        return asdict(self)

    def words(self, events: int | None = None) -> str:
        """Its first ``events`` events (None: all) in words: the build, the capture, each
        replay, the reset."""
        count = len(self.replays) + 3 if events is None else events
        words = [f"built in thread {self.build}"]
        if count > 1:
            words.append(f"captured in thread {self.capture}")
        replays = self.replays[: max(0, count - 2)]
        if replays:
            words.append(f"replayed in thread {' then '.join(replays)}")
        if count > len(self.replays) + 2:
            words.append(f"reset in thread {self.reset}")
        return ", ".join(words)


# Where a message names the thread that built the capture as the one asked.
_BUILDER = ", which built it"
# A lifetime's thread names in a message, and the replays after the first.
_THREAD_NAMES = re.compile(r"\b(thread|then) [XY]\b")
_LATER_REPLAYS = re.compile(r"( then #)+")


def lifetime_symptom(symptom: str) -> str:
    """``symptom`` with the lifetime's thread names masked, as its numbers are: one bug met
    through several lifetimes (built in X and captured in Y, or the other way) is one
    finding, shrunk once."""
    return _LATER_REPLAYS.sub("", _THREAD_NAMES.sub(r"\1 #", symptom)).replace(_BUILDER, "")


def lifetime_from(data: dict[str, Any] | None) -> Lifetime:
    """The lifetime :meth:`Lifetime.as_data` wrote (None: every event in thread X)."""
    return Lifetime(**{**data, "replays": tuple(data["replays"])}) if data else Lifetime()


_THREAD = st.sampled_from(THREADS)


def lifetimes() -> st.SearchStrategy[Lifetime]:
    """Lifetimes of an object built in X (which thread builds it is only a name), up to three
    replays; shrinks towards every event in X."""
    return st.builds(
        Lifetime,
        capture=_THREAD,
        replays=st.lists(_THREAD, min_size=1, max_size=3).map(tuple),
        reset=_THREAD,
    )


class _Job:
    def __init__(self, fn: Callable[[], Any], thread: str) -> None:
        self.fn = fn
        self.thread = thread
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self.fn()
        except BaseException as error:  # handed to the caller, never lost in the thread
            self.error = error
        finally:
            self.done.set()

    def result(self) -> Any:
        if not self.done.wait(WAIT_S):
            raise TimeoutError(f"thread {self.thread} did not finish its event in {WAIT_S:.0f} s")
        if self.error is not None:
            raise self.error
        return self.value


class Worker:
    """One thread that runs the calls it is handed, in order: every event a lifetime draws
    for a thread runs in that same thread, as a runner's thread does its work."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            job.run()

    def call(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` run in this thread; its result, or what it raised."""
        job = _Job(fn, self.name)
        if threading.current_thread() is self._thread:
            job.run()  # already in this thread: queueing would wait on itself
        else:
            self._jobs.put(job)
        return job.result()

    def stop(self) -> None:
        self._jobs.put(None)
        self._thread.join(WAIT_S)


def _asked(target: Any) -> tuple[Any, bool | None]:
    """What this thread is told of its open capture: ``current()`` and, where the class can
    answer it, ``is_active()`` (None otherwise: the faults property judges that answer)."""
    cls = target.BreakableCUDAGraphCapture
    is_active = getattr(cls, "is_active", None)
    try:
        active = bool(is_active()) if callable(is_active) else None
    except Exception:
        active = None
    return cls.current(), active


def _shown(seen: tuple[Any, bool | None]) -> bool:
    return seen[0] is not None or seen[1] is True


def lifetime_problem(
    program: Program, lifetime: Lifetime, at: int, mode: str | None, config: Any
) -> str | None:
    """Runs ``program``'s capture through ``lifetime``, asking both threads what they see as
    it opens and before step ``at``; what went wrong, prefixed by the lifetime's events up to
    it, or None."""
    workers = {name: Worker(name) for name in THREADS}
    try:
        events, problem = _lived(program, lifetime, at, mode, config, workers)
    finally:
        for worker in workers.values():
            worker.stop()
    return None if problem is None else within(f"{lifetime.words(events)}: ", problem)


def _left_in(workers: dict[str, Worker], target: Any, after: str) -> str | None:
    for name, worker in workers.items():
        left = worker.call(lambda name=name: left_active(target, f"thread {name}"))
        if left is not None:
            return f"after {after}, {left}"
    return None


def _lived(
    program: Program,
    lifetime: Lifetime,
    at: int,
    mode: str | None,
    config: Any,
    workers: dict[str, Worker],
) -> tuple[int, str | None]:
    """How many events of ``lifetime`` ran up to its problem, and the problem, or None."""
    target = config.target
    builder, capturer = workers[lifetime.build], workers[lifetime.capture]
    (other,) = (name for name in THREADS if name != lifetime.capture)
    seen: dict[str, Any] = {"asked": []}

    def build(make: Callable[[], Any]) -> Any:
        def in_builder() -> Any:
            try:
                with breadcrumbs.calling(
                    f"BreakableCUDAGraphCapture(), for thread {lifetime.capture}"
                ):
                    seen["capture"] = make()
            except Exception as error:
                seen["build error"] = error
                raise
            seen["built"] = _asked(target)
            return seen["capture"]

        return builder.call(in_builder)

    def pause(index: int, env: dict[int, torch.Tensor]) -> None:
        # As the capture opens, and before the drawn step: the other thread is idle, so the
        # capturing thread hands it the question and waits, one thread at a time.
        if index in (0, at):
            here = _asked(target)
            seen["asked"].append((index, here, workers[other].call(lambda: _asked(target))))

    def capture() -> ProgramRun:
        return ProgramRun(
            program,
            target,
            config.kind,
            config.device,
            config.seed,
            capture_kwargs={} if mode is None else {"capture_error_mode": mode},
            hook=pause,
            reseed=False,  # threads' programs draw no random ops
            inputs=make_inputs(program, config.seed, config.device),
            construct=build,
        )

    try:
        run: ProgramRun | None = capturer.call(capture)
        failed = None
    except Exception as error:
        run, failed = None, error
    # What the threads were shown explains a failed capture better than its error does.
    shown = _shown_problem(seen, lifetime, other)
    if shown is not None:
        return shown
    if failed is not None or run is None:
        # A constructor's error reaches here through the capturing thread, unchanged.
        if "build error" in seen:
            return (
                1,
                f"BreakableCUDAGraphCapture() in thread {lifetime.build} raised {describe(failed)}",
            )
        return 2, f"the capture in thread {lifetime.capture} raised {describe(failed)}"
    problem = _left_in(workers, target, f"the capture closed in thread {lifetime.capture}")
    if problem is not None:
        return 2, problem
    for replay, name in enumerate(lifetime.replays):
        events = 3 + replay
        try:
            seed = config.seed + 1 + replay
            problem = workers[name].call(lambda seed=seed: run.replay_problem(seed))
        except Exception as error:
            return events, f"replay {replay}, in thread {name}, raised {describe(error)}"
        if problem is not None:
            return events, within(f"replay {replay}, in thread {name}: ", problem)
        problem = _left_in(workers, target, f"replay {replay} in thread {name}")
        if problem is not None:
            return events, problem
    events = 3 + len(lifetime.replays)
    try:
        workers[lifetime.reset].call(run.drop)
    except Exception as error:
        return events, f"reset() in thread {lifetime.reset} raised {describe(error)}"
    return events, _left_in(workers, target, f"reset() in thread {lifetime.reset}")


def _shown_problem(seen: dict[str, Any], lifetime: Lifetime, other: str) -> tuple[int, str] | None:
    """What ``current()``/``is_active()`` told a thread that it must not have: the builder a
    capture before it was entered, the other thread the open capture, the capturing thread
    anything but the capture it entered; with how many events had run."""
    built = seen.get("built")
    if built is not None and _shown(built):
        return 1, (
            f"current() in thread {lifetime.build} returned {built[0]!r} (is_active: "
            f"{built[1]}) right after building a capture, before any thread entered it"
        )
    which = _BUILDER if other == lifetime.build else ""
    for index, here, elsewhere in seen["asked"]:
        if _shown(elsewhere):
            return 2, Problem(
                f"current() in another thread returned the capture open in thread "
                f"{lifetime.capture} (asked in thread {other}{which}, before step {index}; "
                f"is_active: {elsewhere[1]})",
                SHOWN_CAPTURE,
            )
        if here[0] is not seen["capture"] or here[1] is False:
            return 2, (
                f"inside its open capture, before step {index}, current() in thread "
                f"{lifetime.capture} returned {here[0]!r} (is_active: {here[1]}), not the "
                "capture it entered"
            )
    return None
