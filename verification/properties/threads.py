"""Property 3, thread isolation: a capture belongs to the thread that opened it.

While thread A captures a drawn program (paused before a drawn step), threads B..N ask for
the current capture (must be none), call a decorated op on tensors they allocate on their
own streams (it must run eagerly, at once) and are never recorded into A's capture; A's
replay equals eager. N threads capturing drawn programs at once, each on its own stream, each
replay correctly; they cross the drawn step one at a time, each while the others are held
inside their captures, so a crossing that disturbs another thread's capture does so on every
run. A fixed scenario has another thread call ``add_eager`` on A's open capture: it must be
refused or run there at once, never recorded into A. Both run under every
``capture_error_mode`` the target accepts; in
``global`` mode CUDA lets other threads' allocations invalidate A's capture (measured on the
H200), so there A may fail, but only with a capture error that leaves nothing active. A target
without that parameter captures in torch's default, ``global``, and is judged as in ``global``.
Under a contract whose runner captures from one thread at a time (vLLM's, SGLang's), the
drawn programs are captured by their threads one after another, as that runner does; a target
that fails only when they overlap gets a ``caller-duty`` note, not a bug. That duty covers
captures only: other threads calling decorated ops eagerly during a capture are checked for
every target, and what the checker sees break there (another thread seeing A's capture as its
own, a decorated call not run at once) is never excused by the capture mode. Each drawn example also lives one capture object
through a drawn :class:`~verification.properties.lifetimes.Lifetime`: built in one thread,
captured, replayed (from either thread, one at a time) and reset in whichever thread drawn.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import strategies as st

from verification import breadcrumbs
from verification.causes import Cause, Problem, describe, within
from verification.devices import DeviceKind
from verification.execute import collector_paused
from verification.findings import CALLER_DUTY, Finding
from verification.programs import Program, default_ops, make_inputs
from verification.properties.base import (
    CheckConfig,
    CheckResult,
    Findings,
    finding_key,
    program_strategy,
    property_finding,
    timed,
)
from verification.properties.lifetimes import (
    SHOWN_CAPTURE,
    WAIT_S,
    Lifetime,
    left_active,
    lifetime_from,
    lifetime_problem,
    lifetime_symptom,
    lifetimes,
)
from verification.properties.runs import ProgramRun
from verification.targets.contracts import ONE_CAPTURING_THREAD

NAME = "threads"
MODES = ("thread_local", "global", "relaxed")
# torch's CUDAGraph.capture_begin default: the mode of a target that takes no mode parameter.
DEFAULT_MODE = "global"


class _NoGate:
    def acquire(self) -> None:
        pass

    def release(self) -> None:
        pass

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        pass


def _gate(kind: DeviceKind) -> Any:
    """On the simulator threads take turns between rendezvous points: its allocator hands a
    block out before a tensor holds it, so another thread's allocation can reclaim it (a
    simulator race, not the target's). Captures still overlap; only execution is serial."""
    return threading.Lock() if kind == "sim" else _NoGate()


def modes_of(target: Any) -> tuple[str | None, ...]:
    """The capture error modes to run: all when the target takes ``capture_error_mode``."""
    try:
        parameters = inspect.signature(target.BreakableCUDAGraphCapture).parameters
    except (TypeError, ValueError):
        return (None,)
    return MODES if "capture_error_mode" in parameters else (None,)


def _thread(fn: Callable[[], None], errors: list[Any], label: str) -> threading.Thread:
    def run() -> None:
        try:
            fn()
        except BaseException as error:  # reported, never lost in the thread
            errors.append((label, error))

    return threading.Thread(target=run, name=label, daemon=True)


def _global(mode: str | None) -> bool:
    return (DEFAULT_MODE if mode is None else mode) == "global"


# What CUDA raises in a capture that another thread's unsafe call ended under ``global``
# mode: the refusal itself, and, in the capturing thread, the capture's end on a stream CUDA
# already took out of capture (seen on the H200 against vLLM 0.33.0 and on the simulator);
# and cuBLAS failing to make a thread's first handle (it allocates) while another thread
# captures (the H200: CUBLAS_STATUS_INTERNAL_ERROR when calling cublasCreate).
_GLOBAL_MODE_ERRORS = ("captur", "present state", "previous error", "cublascreate")


class IsolationBroken(AssertionError):
    """What the checker saw break in another thread while A captured: never excused by a
    capture mode, since one capturing thread at a time still leaves other threads free to
    call decorated ops eagerly during a capture. ``cause`` names it where it is known."""

    def __init__(self, message: str, cause: Cause | None = None) -> None:
        super().__init__(message)
        self.cause = cause


def _invalidated(error: Any) -> bool:
    """Whether ``error`` is CUDA's word for a capture another call invalidated
    (``cudaErrorStreamCaptureInvalidated``)."""
    return error is not None and "previous error during capture" in str(error)


def _global_mode_error(mode: str | None, error: Any) -> bool:
    if isinstance(error, IsolationBroken):
        return False
    text = str(error).lower()
    return _global(mode) and any(part in text for part in _GLOBAL_MODE_ERRORS)


def _bug(errors: list[Any], mode: str | None) -> str | None:
    """The first thread error that is a bug: in ``global`` mode CUDA refuses other threads'
    unsafe calls (allocations, syncs) with a capture error, which is not one."""
    for label, error in errors:
        if not _global_mode_error(mode, error):
            cause = getattr(error, "cause", None) if isinstance(error, IsolationBroken) else None
            text = f"{label}: {describe(error)}"
            return text if cause is None else Problem(text, cause)
    return None


def _with_inputs(program: Program, config: CheckConfig) -> dict[str, Any]:
    """A thread's box holding its program's inputs, made in the calling thread: only the
    captures, not the harness's own set-up, should overlap another thread's capture."""
    return {"inputs": make_inputs(program, config.seed, config.device)}


def _capture_in_thread(
    program: Program, config: CheckConfig, mode: str | None, hook: Any, box: dict[str, Any]
) -> None:
    """Captures ``program`` in this thread into ``box``; its inputs are ``box["inputs"]``,
    made before the threads started (see :func:`_with_inputs`)."""
    kwargs = {} if mode is None else {"capture_error_mode": mode}
    try:
        box["run"] = ProgramRun(
            program,
            config.target,
            config.kind,
            config.device,
            config.seed,
            capture_kwargs=kwargs,
            hook=hook,
            reseed=False,
            inputs=box.get("inputs"),
        )
    except Exception as error:
        box["error"] = error
    box["left"] = left_active(config.target, "the capturing thread")


def _accept_failure(mode: str | None, box: dict[str, Any]) -> str | None:
    """Why a failed capture is a bug, or None when ``global`` mode explains it."""
    error = box["error"]
    if box["left"] is not None:  # what it left behind is the bug; the raise may be allowed
        return within(f"the capture in thread A raised {describe(error)}; after it, ", box["left"])
    if _global_mode_error(mode, error):
        return None
    return f"the capture in thread A raised {describe(error)}"


def _replayed(run: ProgramRun, replay: int, config: CheckConfig, which: str) -> str | None:
    """Replay ``replay`` of a capture made in another thread, made in this one: why it
    differs from eager or what it raised, named by ``which``, or None."""
    where = f"{which} from another thread than the capture's"
    try:
        problem = run.replay_problem(config.seed + 1 + replay)
    except Exception as error:
        return f"{where} raised {describe(error)}"
    return None if problem is None else within(f"{where}: ", problem)


def _others_during_capture(
    program: Program, at: int, others: int, mode: str | None, config: CheckConfig
) -> str | None:
    target, device = config.target, config.device
    inside, done = threading.Event(), threading.Event()
    calls = [0] * others
    results: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * others
    errors: list[Any] = []
    gate = _gate(config.kind)

    def pause(index: int, env: dict[int, torch.Tensor]) -> None:
        if index == at:
            inside.set()
            done.wait(WAIT_S)

    def other(k: int) -> None:
        if not inside.wait(WAIT_S):
            raise TimeoutError("thread A never reached its capture")
        with gate:
            _other_work(k)

    def _other_work(k: int) -> None:
        seen = target.BreakableCUDAGraphCapture.current()
        if seen is not None:
            raise IsolationBroken(
                f"current() in another thread returned thread A's open capture ({seen!r}): "
                "the active capture is not per thread",
                SHOWN_CAPTURE,
            )

        @target.eager_break_during_capture
        def work(x: torch.Tensor, out: torch.Tensor) -> None:
            calls[k] += 1
            out.copy_(x).mul_(2).add_(1)  # in place: no allocation a global capture refuses

        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            x = torch.full((256,), float(k + 1), device=device)
            out = torch.empty_like(x)
            try:
                with breadcrumbs.calling("decorated work() called eagerly on its own stream"):
                    work(x, out)
            except Exception as error:
                # The allocations above are what global mode may refuse; the call itself
                # only launches kernels on this thread's stream, which no mode forbids.
                raise IsolationBroken(
                    f"a decorated call in another thread raised {describe(error)}"
                ) from error
            if calls[k] != 1:
                raise IsolationBroken("a decorated call in another thread did not run at once")
        torch.cuda.current_stream().wait_stream(stream)
        results[k] = (x, out)

    box = _with_inputs(program, config)
    threads = [_thread(lambda k=k: other(k), errors, f"thread {k + 1}") for k in range(others)]
    for t in threads:
        t.start()

    def capture() -> None:
        try:
            _capture_in_thread(program, config, mode, pause, box)
        finally:
            # A capture that failed before the drawn step lets the others go on at once, not
            # after WAIT_S each: its error is the finding, not their wait.
            inside.set()

    capturer = _thread(capture, errors, "A")
    capturer.start()
    for t in threads:
        t.join(WAIT_S)
    done.set()
    capturer.join(WAIT_S)
    bug = _bug(errors, mode)
    if bug is not None:
        return bug
    if "error" in box:
        return _accept_failure(mode, box)
    if box["left"] is not None:
        return box["left"]
    torch.cuda.synchronize()
    for k, result in enumerate(results):
        if result is None:
            continue  # refused by global mode
        x, out = result
        if not torch.equal(out, x * 2 + 1):
            return f"thread {k + 1}'s decorated op computed wrong values"
    before = list(calls)
    run: ProgramRun = box["run"]
    for replay in range(2):
        problem = _replayed(run, replay, config, f"thread A's capture, replay {replay}")
        if problem is not None:
            return problem
    if calls != before:
        return (
            "thread A's replay ran another thread's decorated op: it was recorded into A's capture"
        )
    run.drop()
    return None


class _Turns:
    """Threads paused inside their captures at one step cross it one at a time, in thread
    order: each waits there until every thread has arrived and every thread before it has
    crossed (reached the next step, or stopped). So whatever a thread does between the two
    (end a segment, run a break, begin the next) it does while every other thread has a
    capture open, on every run and every card, not as timing allows."""

    def __init__(self, count: int) -> None:
        self._arrived = [False] * count
        self._crossed = [False] * count
        self._changed = threading.Condition()

    def _wait(self, ready: Callable[[], bool]) -> None:
        with self._changed:
            if not self._changed.wait_for(ready, WAIT_S):
                raise threading.BrokenBarrierError  # another thread never came; it is judged

    def arrive(self, k: int) -> None:
        with self._changed:
            self._arrived[k] = True
            self._changed.notify_all()
        self._wait(lambda: all(self._arrived) and all(self._crossed[:k]))

    def cross(self, k: int, wait: bool = True) -> None:
        with self._changed:
            self._arrived[k] = self._crossed[k] = True
            self._changed.notify_all()
        if wait:
            self._wait(lambda: all(self._crossed))


def _concurrent_captures(
    programs: list[Program], at: int, mode: str | None, config: CheckConfig, serial: bool = False
) -> str | None:
    """``serial``: each thread captures after the one before has finished (the runner's duty)."""
    if serial:
        return _captures_one_thread_at_a_time(programs, mode, config)
    turns = _Turns(len(programs))
    errors: list[Any] = []
    boxes = [_with_inputs(program, config) for program in programs]
    gate = _gate(config.kind)

    def meet(k: int, index: int, last: int) -> None:
        step = min(at, last)
        if index not in (step, step + 1):
            return
        gate.release()
        try:
            if index == step:
                turns.arrive(k)
            else:
                turns.cross(k)
        finally:
            gate.acquire()

    def capture(k: int) -> None:
        last = len(programs[k].steps)
        try:
            with gate:
                _capture_in_thread(
                    programs[k], config, mode, lambda i, env: meet(k, i, last), boxes[k]
                )
        finally:
            turns.cross(k, wait=False)  # a thread that stopped early must not hold the others

    threads = [
        _thread(lambda k=k: capture(k), errors, f"capturer {k}") for k in range(len(programs))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    # A capture CUDA invalidated is what another thread did to it: that thread's own error,
    # where it raised one, names the bug; the invalidated capture's only says it was a victim.
    victims_last = sorted(enumerate(boxes), key=lambda kb: _invalidated(kb[1].get("error")))
    for k, box in victims_last:
        if "error" in box:
            if isinstance(box["error"], threading.BrokenBarrierError):
                continue  # another capture failed first; that one is judged
            problem = _accept_failure(mode, box)
            if problem is not None:
                return within(f"capturer {k}: ", problem)
        elif box.get("left") is not None:
            return f"capturer {k}: {box['left']}"
    bug = _bug(errors, mode)
    if bug is not None:
        return bug
    torch.cuda.synchronize()
    for k, box in enumerate(boxes):
        if "run" not in box:
            continue
        for replay in range(2):
            where = f"capturer {k} of {len(programs)} concurrent captures, replay {replay}"
            problem = _replayed(box["run"], replay, config, where)
            if problem is not None:
                return problem
        box["run"].drop()
    return None


def _captures_one_thread_at_a_time(
    programs: list[Program], mode: str | None, config: CheckConfig
) -> str | None:
    boxes = [_with_inputs(program, config) for program in programs]
    for k, program in enumerate(programs):
        errors: list[Any] = []
        box = boxes[k]
        thread = _thread(
            lambda p=program, b=box: _capture_in_thread(p, config, mode, None, b),
            errors,
            f"capturer {k}",
        )
        thread.start()
        thread.join(WAIT_S)
        if errors:
            return f"capturer {k}: {describe(errors[0][1])}"
        if "error" in box:
            return f"capturer {k}, capturing alone: the capture raised {describe(box['error'])}"
        if box.get("left") is not None:
            return f"capturer {k}: {box['left']}"
    torch.cuda.synchronize()
    for k, box in enumerate(boxes):
        for replay in range(2):
            where = f"capturer {k} of {len(programs)} captures in turn, replay {replay}"
            problem = _replayed(box["run"], replay, config, where)
            if problem is not None:
                return problem
        box["run"].drop()
    return None


def foreign_add_eager_problem(config: CheckConfig) -> str | None:
    """Thread B calls ``add_eager`` on the capture thread A has open: B may be refused, or
    its step may run at once in B, but it must not become a step of A's capture."""
    target, device = config.target, config.device
    inside, done = threading.Event(), threading.Event()
    holder: dict[str, Any] = {}
    errors: list[Any] = []
    ran: list[str] = []
    x = torch.ones(8, device=device)

    def capture() -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            holder["capture"] = target.BreakableCUDAGraphCapture()
            with breadcrumbs.calling("a capture another thread calls add_eager on"):
                with collector_paused(), holder["capture"]:
                    holder["y"] = x * 2
                    inside.set()
                    done.wait(WAIT_S)
                    holder["y"].add_(1)
        torch.cuda.current_stream().wait_stream(side)

    def foreign() -> None:
        if not inside.wait(WAIT_S):
            raise TimeoutError("thread A never reached its capture")
        # A target that shows B thread A's capture records B's work there, whatever B calls.
        holder["seen"] = target.BreakableCUDAGraphCapture.current()
        try:
            with breadcrumbs.calling("add_eager on thread A's open capture"):
                holder["capture"].add_eager(lambda: ran.append("B"))
        except Exception:  # refused: what the check prefers
            pass
        finally:
            done.set()

    threads = [_thread(capture, errors, "A"), _thread(foreign, errors, "B")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    if holder.get("seen") is not None:
        return Problem(
            "current() in another thread returned thread A's open capture", SHOWN_CAPTURE
        )
    if errors:
        label, error = errors[0]
        return f"after thread B called add_eager on thread A's open capture, {label} raised {describe(error)}"
    at_capture = len(ran)
    try:
        x.fill_(3.0)
        with breadcrumbs.calling("replay()"):
            holder["capture"].replay()
        torch.cuda.synchronize()
    except Exception as error:  # what B's call left behind is the target's doing
        return f"after thread B called add_eager on thread A's capture, A's replay raised {describe(error)}"
    if len(ran) != at_capture:
        return "add_eager called from another thread was recorded into thread A's capture"
    if not torch.equal(holder["y"], x * 2 + 1):
        return "after thread B called add_eager on thread A's capture, A replayed wrong values"
    return None


def example(program: Program, scenario: dict[str, Any], config: CheckConfig) -> str | None:
    """Re-checks one finding's program (a reproducer calls this)."""
    mode, at = scenario.get("mode"), scenario.get("at", 0)
    lifetime = lifetime_from(scenario.get("lifetime"))
    return (
        _lifetime_problem(program, lifetime, at, mode, config)
        or _others_during_capture(program, at % (len(program.steps) + 1), 2, mode, config)
        or _concurrent_captures([program, program], at, mode, config)
    )


def _lifetime_problem(
    program: Program, lifetime: Lifetime, at: int, mode: str | None, config: CheckConfig
) -> str | None:
    return lifetime_problem(program, lifetime, at % (len(program.steps) + 1), mode, config)


def _symptom_key(finding: Finding) -> tuple[str, str, str]:
    """A drawn finding's key, blind to which threads its lifetime drew."""
    check, kind, symptom = finding_key(finding)
    return check, kind, lifetime_symptom(symptom)


def check(config: CheckConfig) -> CheckResult:
    # Seeding is process-wide and forbidden during another thread's capture: no RNG ops.
    ops = [spec for spec in default_ops() if not spec.rng]
    modes = modes_of(config.target)
    serial = ONE_CAPTURING_THREAD in config.target.caller_duties
    relied: list[Finding] = []

    def run() -> tuple[int, list[Finding]]:
        found = Findings(NAME, config)
        found.fixed(foreign_add_eager_problem)

        def body(drawn: tuple[Program, list[Program], int, int, int, Lifetime]) -> Finding | None:
            program, programs, at, others, mode_index, lifetime = drawn
            mode = modes[mode_index % len(modes)]
            scenario: tuple[tuple[str, Any], ...] = (
                ("mode", mode),
                ("at", at),
                ("lifetime", lifetime.as_data()),
            )
            problem = _lifetime_problem(program, lifetime, at, mode, config)
            if problem is None:
                problem = _others_during_capture(
                    program, at % (len(program.steps) + 1), others, mode, config
                )
            if problem is None:
                problem = _concurrent_captures(programs, at, mode, config, serial)
            if problem is None and serial and not relied:
                # Once: would the target have held up with the captures overlapping?
                if _concurrent_captures(programs, at, mode, config) is not None:
                    note = config.target.contract.reliance_note(ONE_CAPTURING_THREAD)
                    relied.append(property_finding(NAME, CALLER_DUTY, note))
            if problem is None:
                return None
            message = within(f"capture_error_mode={mode}: ", problem)
            return property_finding(NAME, "target-bug", message, program, config.seed, scenario)

        strategy = st.tuples(
            program_strategy(config, ops=ops),
            st.lists(program_strategy(config, ops=ops), min_size=2, max_size=3),
            st.integers(0, 6),
            st.integers(1, 3),
            st.integers(0, len(modes) - 1),
            lifetimes(),
        )
        found.search(strategy, body, max(len(modes), config.examples // 3), key=_symptom_key)
        examples, findings = found.result()
        return examples, findings + relied

    return timed(NAME, run)
