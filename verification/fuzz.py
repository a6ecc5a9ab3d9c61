"""A fuzz campaign: hypothesis draws programs, the oracle checks them, findings get reports.

With each program goes a capture set its input seed selects (:func:`shared_pool_for`):
usually none, else two or three captures of the program in one pool replayed in some order,
as an engine captures its batch sizes, judged once the program alone passed.

:func:`run_campaign` runs in this process (under the simulator for ``sim``), reports every
distinct violation it meets within its budget (:mod:`verification.search`), each shrunk by
hypothesis, with a reproducer script each.
:func:`run_isolated` runs the same campaign in a child process and turns a child killed
by a signal (a capture bug can abort the process) into a ``crash`` finding for the
program it was running, which the child writes to a file before every example, and a child
killed for standing still in a call (:func:`~verification.isolation.run_child`) into a
``hang`` finding. In the process that runs it, each capture and replay is bounded
(:mod:`verification.bounds`): a call that hangs is a finding, reported as drawn.
"""

from __future__ import annotations

import gc
import pickle
import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.database import ExampleDatabase

from verification.causes import HUNG
from verification.devices import DeviceKind, device_context, resolve_kind
from verification.exampledb import shared_database
from verification.findings import HARNESS_ERROR, TARGET_BUG, Finding
from verification.isolation import run_child, signal_name, stall_s
from verification.ops.spec import OpSpec
from verification.oracle import FUZZ, InvalidProgram, SharedPool, check_program
from verification.programs import Program, programs
from verification.report import render_reproducer, write_reproducer
from verification.search import Outcome, search
from verification.targets import Target, load_target
from verification.usable import unusable


def _default_kind() -> DeviceKind:
    """The kind a campaign built in code runs on when it names none: ``auto``'s."""
    return resolve_kind("auto")


@dataclass
class CampaignConfig:
    """What to fuzz, where and how hard: the ``target`` its front end loaded (its contract
    resolved, :func:`~verification.targets.load_target`) on the device ``kind`` it resolved
    (``sim`` or ``cuda``, :func:`~verification.devices.resolve_kind`). Nothing below takes
    a target's name or a device choice. ``examples=None`` takes the loaded hypothesis
    profile's.

    ``database`` (default: ``BCG_HYPOTHESIS_DB``'s, else none) keeps shrunk findings, which
    every later campaign using it replays before generating new programs.
    """

    target: Target = field(default_factory=load_target)
    kind: DeviceKind = field(default_factory=_default_kind)
    examples: int | None = None
    seed: int = 0
    max_ops: int = 8
    max_breaks: int = 3
    replays: int = 3
    report_dir: Path | None = None
    program_file: Path | None = None
    ops: Sequence[OpSpec] | None = None
    # Set by front ends that draw programs their own way (``fuzz-op``): the program
    # strategy, a hook seeing each program run, and the command its reproducers name.
    strategy: st.SearchStrategy[Program] | None = None
    observe: Callable[[Program], None] | None = None
    command_line: str | None = None
    # The ``--contract`` the user gave, for the command a reproducer names (None: the target's
    # declared one). The target already carries the contract it is judged by.
    contract: str | None = None
    database: ExampleDatabase | None = field(default_factory=shared_database)
    # A wall-clock budget beside the example budget (None: none).
    seconds: float | None = None
    # Only whether the target fails: findings unshrunk, the campaign ends at the first.
    verdict_only: bool = False
    # Draw engine-shaped programs beside plain ones (default catalog only).
    engine: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.target, Target):
            raise TypeError(
                f"CampaignConfig.target must be a loaded Target, not {type(self.target).__name__}:"
                " load it once with verification.targets.load_target"
            )

    def command(self) -> str:
        """The command line that runs this campaign again (a reproducer names it)."""
        if self.command_line is not None:
            return self.command_line
        examples = self.examples if self.examples is not None else settings.default.max_examples
        contract = "" if self.contract is None else f" --contract {self.contract}"
        return (
            f"python -m verification fuzz --target {self.target.name} --device {self.kind} "
            f"--seed {self.seed} --examples {examples} --max-ops {self.max_ops} "
            f"--max-breaks {self.max_breaks} --replays {self.replays}{contract}"
        )


@dataclass
class CampaignResult:
    target: str
    kind: DeviceKind
    examples: int
    elapsed_s: float  # the examples' time, start-up excluded
    findings: list[Finding] = field(default_factory=list)
    reproducers: list[str] = field(default_factory=list)
    reproducer_paths: list[Path] = field(default_factory=list)
    coverage: dict[str, dict[str, int]] = field(default_factory=dict)
    # Opening the device once per campaign: on the simulator mostly torch._dynamo's import
    # (1 to 2 s, needed by torch's meta kernels), a fixed cost no example pays again.
    startup_s: float = 0.0
    # Why the search ended before its budget: a finding left the target unusable.
    stopped: str | None = None

    @property
    def examples_per_second(self) -> float:
        return self.examples / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def summary_line(self) -> str:
        return (
            f"fuzz: {self.examples} examples, {len(self.findings)} findings, device={self.kind}, "
            f"target={self.target}, {self.examples_per_second:.1f} examples/s"
            + (f" (start-up {self.startup_s:.1f} s)" if self.startup_s >= 0.05 else "")
            + (f"; stopped early, target unusable: {self.stopped}" if self.stopped else "")
        )


# What the coverage counts of a campaign count (runs per op, per break op, ...).
COVERAGE_KEYS = ("ops", "break_ops", "break_positions", "input_dtypes", "captures_per_pool")


def _break_positions(program: Program) -> list[str]:
    """Where each break sits: first, last, right after another break, or in between."""
    flags = [s.brk for s in program.steps]
    positions = []
    for i, brk in enumerate(flags):
        if brk:
            where = "first" if i == 0 else "last" if i == len(flags) - 1 else "middle"
            positions.append("adjacent" if i > 0 and flags[i - 1] else where)
    return positions


def _tally(coverage: dict[str, Counter[str]], program: Program) -> None:
    coverage["ops"].update(s.op for s in program.steps)
    coverage["break_ops"].update(s.op for s in program.steps if s.brk)
    coverage["break_positions"].update(_break_positions(program))
    coverage["input_dtypes"].update(str(m.dtype).removeprefix("torch.") for m in program.inputs)


# Captures in an example's capture set: most examples check the program alone, one in four
# also captures it two or three times into one pool, as an engine captures its batch sizes
# (each such example costs about twice a plain one's capture and replays).
CAPTURES = (1, 1, 1, 1, 1, 1, 2, 3)


def shared_pool_for(input_seed: int) -> SharedPool | None:
    """The capture set an example's input seed selects: None (the program alone) for seed 0,
    to which hypothesis shrinks, and for three seeds in four; else 2 or 3 captures in one pool
    replayed in an order of 1 to 4 replays (any order is legal: each replay's outputs are read
    before the next). Derived from the seed rather than drawn, so that the programs a
    campaign's seed draws, example by example, are the ones it drew before capture sets."""
    if input_seed == 0:
        return None
    chance = random.Random(input_seed)
    captures = CAPTURES[chance.randrange(len(CAPTURES))]
    if captures == 1:
        return None
    order = tuple(chance.randrange(captures) for _ in range(chance.randint(1, 4)))
    return SharedPool(captures, order)


def _search(
    config: CampaignConfig,
    device: str,
    counter: list[int],
    coverage: dict[str, Counter[str]],
    progress: Callable[[int], None],
) -> Outcome[Finding]:
    target = config.target
    strategy = (
        config.strategy
        if config.strategy is not None
        else programs(
            max_ops=config.max_ops,
            max_breaks=config.max_breaks,
            ops=config.ops,
            contract=target.contract,
            # Half the programs take host values and share engine breaks, as an engine does.
            engine=config.engine,
        )
    )
    examples = config.examples if config.examples is not None else settings.default.max_examples

    def example(drawn: tuple[Program, int]) -> Finding | None:
        program, input_seed = drawn
        shared = shared_pool_for(input_seed)
        counter[0] += 1
        if config.observe is not None:
            config.observe(program)
        _tally(coverage, program)
        coverage["captures_per_pool"][str(1 if shared is None else shared.captures)] += 1
        progress(1)
        if config.program_file is not None:
            config.program_file.write_bytes(pickle.dumps((program, input_seed)))
        try:
            return check_program(
                program, target, device, input_seed, config.replays, config.ops, shared
            )
        except InvalidProgram as error:
            return Finding(HARNESS_ERROR, FUZZ, str(error), "invalid-program", program, input_seed)

    return search(
        st.tuples(strategy, st.integers(0, 2**16)),
        example,
        examples=examples,
        seed=config.seed,
        # One finding per kind of violation: a mismatch found again in a longer program is
        # the same bug. A capture set's finding is one the program alone did not show.
        key=lambda finding: (finding.kind, finding.violation, bool(finding.scenario)),
        usable=lambda: unusable(target, device),
        database=config.database,
        seconds=config.seconds,
        shrink=not config.verdict_only,
        max_findings=0 if config.verdict_only else 8,
        # Each try of a program whose call hangs costs the whole bound: reported as drawn.
        final=lambda finding: finding.hung,
    )


def report_findings(result: CampaignResult, config: CampaignConfig) -> None:
    """Renders (and, with a report directory, writes) a reproducer for each finding."""
    command = config.command()
    for number, finding in enumerate(result.findings):
        text = render_reproducer(
            finding, config.target, result.kind, command, config.replays, config.ops
        )
        result.reproducers.append(text)
        if config.report_dir is not None:
            name = f"finding_{number}_{finding.violation}"
            result.reproducer_paths.append(write_reproducer(config.report_dir, name, text))


def run_campaign(
    config: CampaignConfig, progress: Callable[[int], None] = lambda advance: None
) -> CampaignResult:
    """Fuzzes ``config.target`` in this process for the example budget.

    ``progress`` is called with 1 after each example drawn (shrinking included).
    """
    kind, target = config.kind, config.target
    counter = [0]
    coverage: dict[str, Counter[str]] = {k: Counter() for k in COVERAGE_KEYS}
    opened = time.perf_counter()
    with device_context(kind) as device:
        start = time.perf_counter()
        # Capture paths that call gc.collect (torch.cuda.graph does, per segment) would walk
        # the whole heap of torch and hypothesis each time; frozen objects are skipped.
        # Frozen once the device is set up, so that what it imported is skipped too.
        gc.freeze()
        try:
            outcome = _search(config, device, counter, coverage, progress)
        finally:
            gc.unfreeze()
    result = CampaignResult(target.name, kind, counter[0], time.perf_counter() - start)
    result.startup_s = start - opened
    result.coverage = {k: dict(sorted(c.items())) for k, c in coverage.items()}
    result.stopped = outcome.stopped
    if outcome.findings:
        result.findings.extend(outcome.findings)
        report_findings(result, config)
    return result


def run_isolated(
    child_argv: Sequence[str], config: CampaignConfig
) -> tuple[int, CampaignResult | None]:
    """Runs ``python -m verification <child_argv>`` and reports a crash if it dies by a signal.

    Returns the child's exit status, and a result holding the crash finding when it died.
    """
    with tempfile.TemporaryDirectory() as scratch:
        program_file = Path(scratch) / "current_program.pickle"
        argv = [*child_argv, "--no-isolate", "--program-file", str(program_file)]
        start = time.perf_counter()
        done = run_child(argv, breadcrumbs=Path(scratch) / "breadcrumbs.txt")
        status = done.returncode
        if status >= 0 and not done.hung:
            return status, None
        if not program_file.exists():
            return 1, None
        program, input_seed = pickle.loads(program_file.read_bytes())
    shared = shared_pool_for(input_seed)
    message = f"the process died by signal {signal_name(status)}"
    violation, cause = "crash", None
    if done.hung:
        message = (
            f"hang: the process did not return from {'; '.join(done.hung)} within "
            f"{stall_s():g} s, and was killed"
        )
        violation, cause = "hang", HUNG
    scenario = () if shared is None else shared.scenario
    if shared is not None:
        message = f"{shared.describe()}: {message}"
    finding = Finding(
        TARGET_BUG, FUZZ, message, violation, program, input_seed, scenario=scenario,
        explained=cause,
    )  # fmt: skip
    elapsed = time.perf_counter() - start
    result = CampaignResult(config.target.name, config.kind, 0, elapsed, [finding])
    report_findings(result, config)
    return 1, result
