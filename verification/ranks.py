"""Programs run on several ranks at once, as a tensor-parallel engine runs its forward pass:
every rank captures the same program, whose collectives (all_reduce, all_gather,
reduce_scatter) are eager breaks between graph segments, and replay must equal eager on every
rank while the ranks agree on every break they run and on every capture they replay.

A :class:`RankPool` starts N rank processes once (forked, one gloo process group on a file
store, each inside the simulator; NCCL on ``cuda``) and feeds them examples in lockstep over
pipes. Each rank builds the same :class:`RankProgram` from the same seed (its inputs are its
own), runs it eagerly, captures it with the target and replays it, and reports the breaks it
ran at capture and at each replay; :func:`judge` turns the ranks' reports into one finding:
a rank that did not answer, ranks that disagree on a break or on a capture of a capture set,
an exception, or a replay that differs from eager. Every collective runs under the process
group's timeout and every example under a wall bound in the parent, which kills the ranks and
starts fresh ones: a deadlock is a finding, never a hang. A finding carries a standalone
reproducer (:func:`render_reproducer`) that imports only torch, torch.distributed and the
target (and the simulator on ``sim``): the code each rank runs is this module's
:data:`SHARED` functions, copied into the script.
"""

from __future__ import annotations

import datetime
import faulthandler
import gc
import inspect
import multiprocessing
import multiprocessing.connection
import os
import random
import shutil
import signal
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from verification.devices import DeviceKind, device_context
from verification.findings import HARNESS_ERROR, TARGET_BUG, Finding
from verification.targets import Target

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
# The forms torch.distributed gives each collective, drawn as its API offers them: every
# reduction a float all_reduce takes (gloo has no AVG), the list and the tensor all_gather,
# and the reductions reduce_scatter takes. A break may also draw random numbers before its
# collective (``noisy``), as a sampler's does: every run seeds the device generator alike.
FORMS = {
    "all_reduce": ("SUM", "MAX", "MIN", "PRODUCT"),
    "all_gather": ("tensor", "list"),
    "reduce_scatter": ("SUM", "MAX", "MIN"),
}
# Captured ops: Python expressions over earlier values, bounded so no value overflows.
UNARY = {
    "tanh": "torch.tanh({a})",
    "sin": "torch.sin({a})",
    "half": "{a} * 0.5",
    "relu": "torch.relu({a})",
    "neg": "-{a}",
}
BINARY = {"add": "{a} + {b}", "mul": "{a} * {b}", "sub": "{a} - {b}"}
# A collective captured inside a segment: only a backend whose collectives a CUDA graph can
# record (NCCL on a GPU) runs it; gloo's run on the host and are never drawn captured.
CAPTURABLE_BACKENDS = frozenset({"nccl"})
CAPTURE_SET_SIZES = (4, 2, 1)
CAPTURE_ERROR_MODES = ("thread_local", "global")
# The parts of ``check ranks``: drawn programs (break placement, replay against eager), capture
# sets called with equal batches, and one rank capturing while its peers run eagerly.
CHECK_PARTS = ("programs", "capture-sets", "invalidation")


@dataclass(frozen=True)
class RankStep:
    """One step: a captured op of :data:`UNARY`/:data:`BINARY` or a collective of
    :data:`COLLECTIVES` (an eager break; ``captured``: recorded inside the segment) reading
    values ``args``; every step defines the next value."""

    op: str
    args: tuple[int, ...]
    captured: bool = False
    form: str = ""  # of FORMS[op]: the reduction, or all_gather's output form
    noisy: bool = False  # the break adds random numbers to its input before the collective


@dataclass(frozen=True)
class RankProgram:
    """``inputs`` float32 inputs of ``(rows, cols)`` (rows a multiple of the ranks), the steps,
    and the values it returns."""

    inputs: int
    rows: int
    cols: int
    steps: tuple[RankStep, ...]
    outputs: tuple[int, ...]

    def describe(self) -> str:
        names = [
            s.op if s.op in UNARY or s.op in BINARY else f"{s.op}[{s.form}{', noisy' * s.noisy}]!"
            for s in self.steps
        ]
        return " ".join(names)


def draw_program(
    seed: int, world: int, max_ops: int = 8, max_breaks: int = 3, captured_collectives: bool = False
) -> RankProgram:
    """The program ``seed`` draws, the same on every rank: captured ops with up to
    ``max_breaks`` collectives at random places, each on a value the program computed."""
    chance = random.Random(seed)
    inputs = chance.randint(1, 2)
    steps: list[RankStep] = []
    values = inputs
    breaks = 0
    for _ in range(chance.randint(2, max(2, max_ops))):
        computed = list(range(inputs, values))
        if computed and breaks < max_breaks and chance.random() < 0.35:
            op = chance.choice(COLLECTIVES)
            steps.append(
                RankStep(
                    op,
                    (chance.choice(computed),),
                    captured_collectives and chance.random() < 0.5,
                    chance.choice(FORMS[op]),
                    chance.random() < 0.25,
                )
            )
            breaks += 1
        elif chance.random() < 0.5:
            op = chance.choice(tuple(UNARY))
            steps.append(RankStep(op, (chance.randrange(values),)))
        else:
            op = chance.choice(tuple(BINARY))
            steps.append(RankStep(op, (chance.randrange(values), chance.randrange(values))))
        values += 1
    if breaks == 0:  # a program without a collective checks nothing of ranks
        op = chance.choice(COLLECTIVES)
        steps.append(RankStep(op, (values - 1,), False, chance.choice(FORMS[op])))
        values += 1
    last = values - 1
    others = [v for v in range(inputs, last) if chance.random() < 0.3]
    return RankProgram(
        inputs, world * chance.randint(1, 3), chance.randint(1, 5), tuple(steps), (*others, last)
    )


def backend(kind: DeviceKind) -> str:
    """The process group's backend on ``kind``: NCCL on GPUs, gloo on the simulator's host."""
    return "nccl" if kind == "cuda" else "gloo"


def break_label(step: RankStep, index: int) -> str:
    return f"{step.op}#{index}"


def program_source(program: RankProgram) -> str:
    """``build_forward(brk, log, WORLD)``: the program as Python, its collectives defined as
    functions decorated by ``brk`` (the target's break decorator) that log their label before
    they run; what a rank runs and what a reproducer prints."""
    lines = ["def build_forward(brk, log, WORLD):"]
    for i, step in enumerate(program.steps):
        if step.op not in COLLECTIVES:
            continue
        name, label = f"{step.op}_{i}", break_label(step, i)
        reduction = f"op=dist.ReduceOp.{step.form or 'SUM'}"
        call = {
            "all_reduce": ("x", f"dist.all_reduce(x, {reduction})"),
            "all_gather": (
                # The output list is the break's argument, as a caller's gather buffers are;
                # gathered flat, then copied into it (gloo's list form takes host tensors).
                (
                    "outs, x",
                    "flat = x.new_empty((WORLD * x.shape[0], x.shape[1]))\n"
                    "        dist.all_gather_into_tensor(flat, x)\n"
                    "        for out, part in zip(outs, flat.chunk(WORLD)):\n"
                    "            out.copy_(part)",
                )
                if step.form == "list"
                else ("out, x", "dist.all_gather_into_tensor(out, x)")
            ),
            "reduce_scatter": ("out, x", f"dist.reduce_scatter_tensor(out, x, {reduction})"),
        }[step.op]
        if not step.captured:
            lines.append("    @brk")
        lines += [f"    def {name}({call[0]}):", f"        log.append({label!r})"]
        if step.noisy:  # in place, so the collective reduces what the break drew
            lines.append("        x.add_(torch.rand_like(x) * 0.1)")
        lines += [f"        {call[1]}", ""]
    params = ", ".join(f"v{i}" for i in range(program.inputs))
    lines.append(f"    def forward({params}):")
    value = program.inputs
    for i, step in enumerate(program.steps):
        a = f"v{step.args[0]}"
        if step.op == "all_reduce":
            lines += [f"        v{value} = {a}.clone()", f"        all_reduce_{i}(v{value})"]
        elif step.op == "all_gather":
            lines += [
                f"        g{i} = {a}.new_empty((WORLD * {a}.shape[0], {a}.shape[1]))",
                (
                    f"        all_gather_{i}(list(g{i}.chunk(WORLD)), {a})"
                    if step.form == "list"
                    else f"        all_gather_{i}(g{i}, {a})"
                ),
                f"        v{value} = g{i}.view(WORLD, *{a}.shape).mean(0)",
            ]
        elif step.op == "reduce_scatter":
            lines += [
                f"        s{i} = {a}.new_empty(({a}.shape[0] // WORLD, {a}.shape[1]))",
                f"        reduce_scatter_{i}(s{i}, {a})",
                f"        v{value} = s{i}.repeat(WORLD, 1)",
            ]
        else:
            table = UNARY if step.op in UNARY else BINARY
            args = {"a": a, "b": f"v{step.args[-1]}"}
            lines.append(f"        v{value} = {table[step.op].format(**args)}")
        value += 1
    lines.append(f"        return ({''.join(f'v{v}, ' for v in program.outputs)})")
    lines.append("    return forward")
    return "\n".join(lines) + "\n"


# ---- What every rank runs: copied verbatim into reproducers (torch and dist only). ----


class BreakLog:
    """The labels of the breaks a rank ran in the current stage; ``notify`` hears each one as
    it starts (the parent learns where a rank waits)."""

    def __init__(self, notify=None):
        self.entries = []
        self.stage = "start"
        self.notify = notify

    def enter(self, stage):
        self.stage = stage
        if self.notify is not None:
            self.notify((stage, None))

    def append(self, label):
        self.entries.append(label)
        if self.notify is not None:
            self.notify((self.stage, label))

    def take(self):
        taken, self.entries = self.entries, []
        return taken


def rank_inputs(seed, rank, run, count, rows, cols, device):
    """This rank's inputs for run ``run`` (0: the capture's): every rank its own values."""
    g = torch.Generator().manual_seed(seed * 7919 + rank * 101 + run)
    return [torch.randn((rows, cols), generator=g).to(device) for _ in range(count)]


def first_difference(got, want):
    """(output, max |got - want|) of the first output of ``got`` that differs, or None."""
    for index, (a, b) in enumerate(zip(got, want)):
        a = a.detach().cpu()
        if a.shape != b.shape or not torch.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True):
            gap = (
                float((a - b).abs().nan_to_num(float("inf")).max()) if a.shape == b.shape else -1.0
            )
            return index, gap
    return None


def run_example(forward, log, inputs_for, replays, make_capture, capturing):
    """Eager on each replay's inputs, then (``capturing``) a capture on a side stream and its
    replays, else the same runs eagerly (a peer capturing meanwhile). Returns this rank's
    report: the breaks of the capture and of each replay, the first mismatch, the error."""
    report = {"capture": [], "replays": [], "mismatch": None, "error": None, "stage": None}
    try:
        eager = []
        for run in range(1, replays + 1):
            log.enter(f"eager run {run}")
            torch.cuda.manual_seed(run)  # a break drawing random numbers draws alike at replay
            eager.append([t.detach().cpu().clone() for t in forward(*inputs_for(run))])
        log.take()
        static = [x.clone() for x in inputs_for(0)]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            log.enter("warm-up")
            forward(*static)
            log.take()
            log.enter("capture")
            if capturing:
                capture = make_capture()
                gc.disable()  # the runner's duty: no collector inside a capture
                try:
                    with capture:
                        outputs = forward(*static)
                finally:
                    gc.enable()
            else:
                outputs = forward(*static)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        report["capture"] = log.take()
        for run in range(1, replays + 1):
            log.enter(f"replay {run}")
            for buffer, value in zip(static, inputs_for(run)):
                buffer.copy_(value)
            torch.cuda.manual_seed(run)
            if capturing:
                capture.replay()
            else:
                outputs = forward(*static)
            torch.cuda.synchronize()
            report["replays"].append(log.take())
            differs = first_difference(outputs, eager[run - 1])
            if differs is not None and report["mismatch"] is None:
                report["mismatch"] = (run, *differs)
    except Exception as error:
        report["error"] = f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
        report["stage"] = log.stage
        report["partial"] = log.take()
    return report


def run_capture_set(capture_set, brk, log, batches, cols, device, seed, rank):
    """A capture set of one row-wise program with an all_reduce break, captured at every
    size of (4, 2, 1) and called with ``batches`` (the same on every rank); the breaks of
    each call name the rows the replayed capture handed the all_reduce."""
    report = {"capture": [], "replays": [], "mismatch": None, "error": None, "stage": None}

    @brk
    def all_reduce_rows(x):
        log.append(f"all_reduce of {x.shape[0]} rows")
        dist.all_reduce(x)

    def fn(x):
        h = torch.tanh(x) * 2
        all_reduce_rows(h)
        return h + 1

    try:
        calls = [
            rank_inputs(seed, rank, run, 1, batch, cols, device)[0]
            for run, batch in enumerate(batches)
        ]
        log.enter("eager")
        eager = [[fn(x).detach().cpu().clone()] for x in calls]
        log.take()
        log.enter("capture")
        gc.disable()
        try:
            captured = capture_set(fn, (4, 2, 1), [torch.zeros((1, cols), device=device)])
        finally:
            gc.enable()
        report["capture"] = log.take()
        for run, x in enumerate(calls):
            log.enter(f"call {run + 1} (batch {x.shape[0]})")
            got = captured(x)
            torch.cuda.synchronize()
            report["replays"].append(log.take())
            differs = first_difference([got], eager[run])
            if differs is not None and report["mismatch"] is None:
                report["mismatch"] = (run + 1, *differs)
    except Exception as error:
        report["error"] = f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
        report["stage"] = log.stage
        report["partial"] = log.take()
    return report


def break_sequence(report):
    """(stage, label) of every break a rank ran from the capture on, the stage that raised
    last."""
    sequence = [("capture", label) for label in report["capture"]]
    for run, labels in enumerate(report["replays"], 1):
        sequence += [(f"replay {run}", label) for label in labels]
    if report["error"] is not None:
        sequence += [(report["stage"], label) for label in report.get("partial", [])]
    return sequence


def disagreement(reports, what="break placement differs between ranks"):
    """(violation, message) for the first way the ranks' reports part, or None: the breaks
    they ran, in order (``what`` says what a difference means), then an exception, then a
    replay that differs from eager."""
    placed = placement_difference(reports, what)
    if placed is not None:
        return placed
    for rank, report in enumerate(reports):
        if report["error"] is not None:
            return "error", f"rank {rank} raised {report['error']} in {report['stage']}"
    mismatched = [(rank, r["mismatch"]) for rank, r in enumerate(reports) if r["mismatch"]]
    if mismatched:
        rank, (run, output, gap) = mismatched[0]
        every = " on every rank" if len(mismatched) == len(reports) else f" on rank {rank}"
        return "mismatch", (
            f"replay {run} differs from eager at output {output} (max |replay - eager| = "
            f"{gap:.3g}){every}: replay does not equal eager"
        )
    return None


def placement_difference(reports, what):
    """(violation, message) for the first break where the ranks' sequences part, or None."""
    reference = break_sequence(reports[0])
    for rank, report in enumerate(reports[1:], 1):
        sequence = break_sequence(report)
        for position in range(max(len(reference), len(sequence))):
            mine = sequence[position] if position < len(sequence) else None
            theirs = reference[position] if position < len(reference) else None
            if mine == theirs:
                continue
            stage = (mine or theirs)[0]
            if mine is None and report["error"] is not None:
                break  # a rank that raised ran fewer breaks: its exception says why
            if theirs is None and reports[0]["error"] is not None:
                break
            verb = "replayed" if stage.startswith(("replay", "call")) else "recorded"
            ran = "no break" if mine is None else f"break {mine[1]}"
            other = "nothing" if theirs is None else theirs[1]
            violation = "capture-set-size" if "capture set" in what else "placement"
            return (
                violation,
                f"rank {rank} {verb} {ran} in {stage} where rank 0 {verb} {other}: {what}",
            )
    return None


def seen_report(trail):
    """The report of a rank that did not answer: the breaks ``trail`` (its ``(stage, label)``
    notices) shows it start from the capture on, marked ``silent``."""
    stages = {}
    last = "start"
    for stage, label in trail:
        last = stage
        if stage.startswith(("replay", "call", "capture")):
            stages.setdefault(stage, [])
            if label is not None:
                stages[stage].append(label)
    capture = stages.pop("capture", [])
    return {
        "capture": capture,
        "replays": list(stages.values()),
        "mismatch": None,
        "error": "did not finish",
        "stage": last,
        "partial": [],
        "silent": True,
    }


SHARED: tuple[Any, ...] = (
    BreakLog,
    rank_inputs,
    first_difference,
    run_example,
    run_capture_set,
    break_sequence,
    placement_difference,
    disagreement,
    seen_report,
)

# ---- The harness's side: rank processes, jobs, findings. ----


@dataclass(frozen=True)
class Job:
    """One lockstep unit of work for every rank: ``kind`` ``example`` (a drawn program;
    ``capturing`` the ranks that capture, the others run it eagerly, ``mode`` the capture's
    error mode or None for the target's default) or ``capture-set`` (``batches``)."""

    kind: str
    seed: int
    program: RankProgram | None = None
    replays: int = 3
    capturing: tuple[int, ...] | None = None
    mode: str | None = None
    batches: tuple[int, ...] = ()


def _capture_factory(target: Target, mode: str | None) -> Callable[[], Any]:
    if mode is None:
        return target.BreakableCUDAGraphCapture
    return lambda: target.BreakableCUDAGraphCapture(capture_error_mode=mode)


def takes_error_mode(target: Target) -> bool:
    """Whether the target's capture takes ``capture_error_mode=`` (the library's does)."""
    try:
        return (
            "capture_error_mode" in inspect.signature(target.BreakableCUDAGraphCapture).parameters
        )
    except (TypeError, ValueError):
        return False


def _run_job(job: Job, target: Target, rank: int, world: int, device: str, log: BreakLog) -> dict:
    if job.kind == "capture-set":
        cs = target.capture_set
        return run_capture_set(
            cs, target.eager_break_during_capture, log, job.batches, 3, device, job.seed, rank
        )
    program = job.program
    assert program is not None
    namespace: dict[str, Any] = {"torch": torch, "dist": dist}
    exec(compile(program_source(program), f"<rank program {job.seed}>", "exec"), namespace)
    forward = namespace["build_forward"](target.eager_break_during_capture, log, world)
    capturing = job.capturing is None or rank in job.capturing

    def inputs_for(run: int) -> list[torch.Tensor]:
        return rank_inputs(job.seed, rank, run, program.inputs, program.rows, program.cols, device)

    return run_example(
        forward, log, inputs_for, job.replays, _capture_factory(target, job.mode), capturing
    )


def _rank_main(
    rank: int,
    world: int,
    store: str,
    conn: Any,
    target: Target,
    kind: DeviceKind,
    collective_s: float,
) -> None:
    faulthandler.disable()  # a rank gloo aborts is a finding, not a traceback dump
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to report
    # torch 2.13 renames all_gather_into_tensor and reduce_scatter_tensor; the old names
    # run on every torch a GPU machine may have.
    warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed")
    if kind == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(
        backend(kind), init_method=f"file://{store}", rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=collective_s),
    )  # fmt: skip
    with device_context(kind) as device:
        if kind == "cuda":
            device = f"cuda:{rank}"
        conn.send(("ready", None))
        while True:
            job = conn.recv()
            if job is None:
                break
            log = BreakLog(lambda where: conn.send(("at", where)))
            report = _run_job(job, target, rank, world, device, log)
            conn.send(("done", report))
    os._exit(0)  # gloo's teardown can wait on a peer that is gone


@dataclass
class RanksConfig:
    """What to run on ranks: the ``target`` on ``world`` ranks of device ``kind``; each
    collective may wait ``collective_s`` (the process group's timeout), each example
    ``example_s`` of wall time before the parent kills the ranks."""

    target: Target
    kind: DeviceKind = "sim"
    world: int = 2
    examples: int = 100
    seed: int = 0
    max_ops: int = 8
    max_breaks: int = 3
    replays: int = 3
    collective_s: float = 5.0
    example_s: float = 30.0
    report_dir: Path | None = None
    command: str = ""
    # What ``check ranks`` runs, of :data:`CHECK_PARTS` (``fuzz --ranks`` runs programs only).
    parts: tuple[str, ...] = CHECK_PARTS
    # Collectives also drawn inside segments: NCCL on a GPU records them; gloo never can.
    # Off by default until a GPU run shows the targets capture NCCL work as NCCL documents.
    captured_collectives: bool = False


class RankPool:
    """``world`` rank processes, started once and fed jobs in lockstep; :meth:`restart` after
    a finding leaves their process group in an unknown state."""

    def __init__(self, config: RanksConfig) -> None:
        self.config = config
        self.processes: list[Any] = []
        self.conns: list[Any] = []
        self.scratch = Path(tempfile.mkdtemp(prefix="bcg-ranks-"))
        self.starts = 0
        self.stale = False
        # Opening the simulator imports most of its cost (torch._dynamo); done once here,
        # every fork starts with it instead of paying it per rank and per restart.
        with device_context(config.kind):
            pass
        self.start()

    def start(self) -> None:
        config = self.config
        context = multiprocessing.get_context("fork")
        store = self.scratch / f"store{self.starts}"
        self.starts += 1
        for rank in range(config.world):
            parent, child = context.Pipe()
            process = context.Process(
                target=_rank_main,
                args=(
                    rank,
                    config.world,
                    str(store),
                    child,
                    config.target,
                    config.kind,
                    config.collective_s,
                ),
                daemon=True,
            )
            process.start()
            child.close()
            self.processes.append(process)
            self.conns.append(parent)
        for rank, conn in enumerate(self.conns):
            if not conn.poll(config.example_s + 30) or conn.recv()[0] != "ready":
                self.stop()
                raise RuntimeError(f"rank {rank} did not start its process group")

    def stop(self) -> None:
        for conn in self.conns:
            try:
                conn.send(None)
            except OSError:
                pass
        deadline = time.monotonic() + 2
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
        self.processes, self.conns = [], []

    def restart(self) -> None:
        self.stale = False
        self.kill()
        self.start()

    def kill(self) -> None:
        for process in self.processes:
            process.kill()
            process.join()
        self.processes, self.conns = [], []

    def close(self) -> None:
        if self.stale:  # a rank may be stuck: nothing to wait for
            self.kill()
        self.stop()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def run(self, job: Job) -> tuple[list[dict], list[str]]:
        """Every rank's report of ``job`` (for one that did not answer within the bound or
        died, the breaks it was seen to start, and ``silent``), and where each rank last was."""
        if self.stale:
            self.restart()
        for conn in self.conns:
            conn.send(job)
        reports: list[dict | None] = [None] * len(self.conns)
        where = ["before its first break"] * len(self.conns)
        trails: list[list[tuple[str, str | None]]] = [[] for _ in self.conns]
        pending = dict(enumerate(self.conns))
        deadline = time.monotonic() + self.config.example_s
        while pending and time.monotonic() < deadline:
            ready = multiprocessing.connection.wait(
                list(pending.values()), deadline - time.monotonic()
            )
            for conn in ready:
                rank = self.conns.index(conn)
                try:
                    what, value = conn.recv()
                except (EOFError, OSError):
                    self.processes[rank].join(1)
                    where[rank] += f"; the process died (exit code {self.processes[rank].exitcode})"
                    del pending[rank]
                    continue
                if what == "at":
                    stage, label = value
                    trails[rank].append(value)
                    where[rank] = f"in {stage}" if label is None else f"at break {label} in {stage}"
                else:
                    reports[rank] = value
                    del pending[rank]
        return [
            r if r is not None else seen_report(trails[k]) for k, r in enumerate(reports)
        ], where


def _finding(check: str, violation: str, message: str, job: Job, scenario: tuple = ()) -> Finding:
    return Finding(
        TARGET_BUG, check, message, violation, None, job.seed, scenario=(("job", job), *scenario)
    )


def judge(
    check: str, job: Job, reports: list[dict], where: list[str], bound_s: float
) -> Finding | None:
    """The finding the ranks' reports of ``job`` make, or None: ranks that part at a break
    first (a rank that did not answer, by the breaks it was seen to start), then a rank that
    did not answer, then what :func:`disagreement` says."""
    label = f"example seed {job.seed}" if job.kind == "example" else f"capture set seed {job.seed}"
    what = (
        "ranks replay different captures of one capture set"
        if job.kind == "capture-set"
        else "break placement differs between ranks"
    )
    mode = (
        f" (capture_error_mode={job.mode or 'default'}, rank {job.capturing[0]} capturing alone)"
        if job.capturing
        else ""
    )
    silent = [rank for rank, report in enumerate(reports) if report.get("silent")]
    placed = placement_difference(reports, what) if silent else None
    if placed is not None:
        return _finding(check, placed[0], f"{label}{mode}: {placed[1]}", job)
    if silent:
        waits = "; ".join(f"rank {rank} was {where[rank]}" for rank in silent)
        others = "; ".join(
            f"rank {rank} raised {report['error']}"
            for rank, report in enumerate(reports)
            if not report.get("silent") and report["error"] is not None
        )
        message = (
            f"{label}{mode}: rank {', '.join(map(str, silent))} did not finish within "
            f"{bound_s:g} s ({waits}{'; ' + others if others else ''}): a collective no peer "
            "joined, or a rank stuck in the target"
        )
        return _finding(check, "rank-timeout", message, job)
    parted = disagreement(reports, what)
    if parted is None:
        return None
    violation, message = parted
    if job.capturing:
        # The same program passes with every rank capturing: what broke is one rank's
        # capture meeting its peers' eager collectives.
        alone = job.capturing[0]
        violation = "invalidation"
        message += f"; rank {alone}'s capture does not survive its peers' collectives"
    return _finding(check, violation, f"{label}{mode}: {message}", job)


@dataclass
class RanksResult:
    target: str
    kind: DeviceKind
    examples: int
    elapsed_s: float
    findings: list[Finding] = field(default_factory=list)
    reproducers: list[str] = field(default_factory=list)
    reproducer_paths: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def summary_line(self, check: str) -> str:
        command = "fuzz --ranks" if check == "fuzz" else f"check {check}"
        return (
            f"{command}: {self.examples} examples, {len(self.findings)} findings, "
            f"device={self.kind}, target={self.target}, {self.elapsed_s:.1f} s"
        )


def _jobs_fuzz(config: RanksConfig) -> list[Job]:
    # Half the collectives drawn captured, where asked and the backend can record them.
    captured = config.captured_collectives and backend(config.kind) in CAPTURABLE_BACKENDS
    return [
        Job(
            "example",
            seed,
            draw_program(seed, config.world, config.max_ops, config.max_breaks, captured),
            config.replays,
        )
        for seed in range(config.seed, config.seed + config.examples)
    ]


def _jobs_check(config: RanksConfig) -> tuple[list[Job], list[str]]:
    """The ranks check: drawn programs (placement, values), capture sets called with equal
    batches on every rank, and each rank capturing alone while its peers run the same
    collectives eagerly, in each capture-error mode the target takes."""
    notes = []
    jobs = _jobs_fuzz(config) if "programs" in config.parts else []
    if "capture-sets" in config.parts and config.target.capture_set is not None:
        for seed in range(config.seed, config.seed + max(1, config.examples // 4)):
            batches = list(range(1, CAPTURE_SET_SIZES[0] + 1))
            random.Random(seed).shuffle(batches)  # every batch, in some order
            batches = tuple(batches)
            jobs.append(Job("capture-set", seed, batches=batches))
    elif "capture-sets" in config.parts:
        notes.append("capture sets: not applicable, the target has no CaptureSet")
    modes: tuple[str | None, ...] = (
        CAPTURE_ERROR_MODES if takes_error_mode(config.target) else (None,)
    )
    if "invalidation" not in config.parts:
        return jobs, notes
    if modes == (None,):
        notes.append("capture-error modes: the target's capture takes none; its default only")
    for seed in range(config.seed, config.seed + max(1, config.examples // 4)):
        program = draw_program(seed, config.world, config.max_ops, config.max_breaks)
        for mode in modes:
            for rank in range(config.world):
                jobs.append(Job("example", seed, program, config.replays, (rank,), mode))
    return jobs, notes


def run_ranks(
    config: RanksConfig, check: str = "fuzz", progress: Callable[[int], None] = lambda n: None
) -> RanksResult:
    """Runs ``fuzz --ranks`` (``check="fuzz"``) or ``check ranks`` (``check="ranks"``):
    every job on the ranks, each finding of a new violation reported once with its reproducer;
    after a finding the ranks start afresh."""
    if check == "fuzz":
        jobs, notes = _jobs_fuzz(config), []
    else:
        jobs, notes = _jobs_check(config)
    start = time.perf_counter()
    result = RanksResult(config.target.name, config.kind, 0, 0.0, notes=notes)
    seen: set[str] = set()
    pool = RankPool(config)
    try:
        for job in jobs:
            if job.kind == "capture-set" and "capture-set-size" in seen:
                continue
            reports, where = pool.run(job)
            result.examples += 1
            progress(1)
            finding = judge(check, job, reports, where, config.example_s)
            if finding is None:
                continue
            pool.stale = True  # its process group may be mid-collective: fresh ranks next
            if finding.violation in seen:
                break  # the target fails every example so: nothing new to find
            seen.add(str(finding.violation))
            result.findings.append(finding)
            text = render_reproducer(finding, job, config)
            result.reproducers.append(text)
            if config.report_dir is not None:
                config.report_dir.mkdir(parents=True, exist_ok=True)
                path = (
                    config.report_dir / f"ranks_{len(result.findings) - 1}_{finding.violation}.py"
                )
                path.write_text(text)
                result.reproducer_paths.append(path)
    except Exception as error:
        result.findings.append(Finding(HARNESS_ERROR, check, f"the ranks failed: {error}", "ranks"))
    finally:
        pool.close()
    result.elapsed_s = time.perf_counter() - start
    return result


_REPRODUCER_MAIN = """
def rank_main(rank, store, out):
    dist.init_process_group(
        BACKEND, init_method="file://" + store, rank=rank, world_size=WORLD,
        timeout=datetime.timedelta(seconds=COLLECTIVE_S),
    )
    device = "cuda"
    if BACKEND == "nccl":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    trail = open(os.path.join(out, f"rank{rank}.trail"), "w", buffering=1)
    log = BreakLog(lambda notice: trail.write(json.dumps(notice) + "\\n"))
    with DEVICE_CONTEXT():
        report = JOB(rank, device, log)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as file:
        json.dump(report, file)
    os._exit(0)


def main():
    with DEVICE_CONTEXT():
        pass  # its imports once, before the ranks fork
    scratch = tempfile.mkdtemp()
    context = multiprocessing.get_context("fork")
    ranks = [
        context.Process(target=rank_main, args=(rank, os.path.join(scratch, "store"), scratch))
        for rank in range(WORLD)
    ]
    for process in ranks:
        process.start()
    deadline = time.monotonic() + WALL_S
    for process in ranks:
        process.join(max(0.0, deadline - time.monotonic()))
    reports = []
    for rank, process in enumerate(ranks):
        if process.is_alive():
            process.kill()
        path = os.path.join(scratch, f"rank{rank}.json")
        if os.path.exists(path):
            reports.append(json.load(open(path)))
        else:
            trail = [json.loads(line) for line in open(os.path.join(scratch, f"rank{rank}.trail"))]
            reports.append(seen_report(trail))
    silent = [rank for rank, report in enumerate(reports) if report.get("silent")]
    parted = placement_difference(reports, WHAT) if silent else None
    if parted is None and silent:
        print(f"BUG: rank {silent} did not finish within {WALL_S} s (a collective no peer joined)")
        sys.exit(1)
    parted = parted or disagreement(reports, WHAT)
    if parted is not None:
        print(f"BUG: {parted[1]}")
        sys.exit(1)
    print("no bug: every rank agreed and replay equals eager")


if __name__ == "__main__":
    main()
"""


def render_reproducer(finding: Finding, job: Job, config: RanksConfig) -> str:
    """A script that runs ``job`` on ``config.world`` ranks with the target alone and exits 1
    while the bug is there."""
    sim = config.kind == "sim"
    shared = "\n\n".join(inspect.getsource(obj) for obj in SHARED)
    if job.kind == "capture-set":
        body = (
            "def JOB(rank, device, log):\n"
            "    return run_capture_set(target.CaptureSet, target.eager_break_during_capture, log, "
            f"{job.batches!r}, 3, device, SEED, rank)\n"
        )
        what = "ranks replay different captures of one capture set"
        program_text = ""
    else:
        program = job.program
        assert program is not None
        program_text = program_source(program)
        mode = "" if job.mode is None else f"capture_error_mode={job.mode!r}"
        capturing = "True" if job.capturing is None else f"rank in {tuple(job.capturing)!r}"
        body = (
            "def JOB(rank, device, log):\n"
            "    forward = build_forward(target.eager_break_during_capture, log, WORLD)\n"
            "    def inputs_for(run):\n"
            f"        return rank_inputs(SEED, rank, run, {program.inputs}, {program.rows}, {program.cols}, device)\n"
            f"    make_capture = lambda: target.BreakableCUDAGraphCapture({mode})\n"
            f"    return run_example(forward, log, inputs_for, {job.replays}, make_capture, {capturing})\n"
        )
        what = "break placement differs between ranks"
    if job.kind == "capture-set":
        what = "ranks replay different captures of one capture set"
    header = (
        f'"""Reproducer: {finding.summary()}\n\n'
        f"Found by: {config.command}\n"
        f"Runs {config.world} ranks ({'gloo, on the CUDA simulator' if sim else 'NCCL, one GPU each'}); "
        "exits 1 and prints BUG while the bug is there.\n"
        '"""\n\n'
        "import datetime\nimport gc\nimport json\nimport multiprocessing\nimport os\nimport sys\n"
        "import tempfile\nimport time\n\nimport torch\nimport torch.distributed as dist\n\n"
        f"{config.target.import_code}\n"
    )
    if sim:
        header += "from verification.sim import simulated_cuda as DEVICE_CONTEXT\n"
    else:
        header += "from contextlib import nullcontext as DEVICE_CONTEXT\n"
    constants = (
        f"\nWORLD = {config.world}\nSEED = {job.seed}\nBACKEND = {'gloo' if sim else 'nccl'!r}\n"
        f"COLLECTIVE_S = {config.collective_s:g}\nWALL_S = {config.example_s:g}\nWHAT = {what!r}\n\n"
    )
    return header + constants + shared + "\n\n" + program_text + "\n" + body + _REPRODUCER_MAIN


__all__ = [
    "COLLECTIVES",
    "Job",
    "RankPool",
    "RankProgram",
    "RanksConfig",
    "RanksResult",
    "draw_program",
    "judge",
    "program_source",
    "render_reproducer",
    "run_ranks",
]
