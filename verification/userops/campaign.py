"""A user's break ops fuzzed in captured programs: what ``fuzz-op`` and ``certify --ops`` run.

:func:`load_user_ops` loads the ``MODULE:SPEC`` refs, :func:`contract_violations` checks each
op against its declared contract (:mod:`verification.userops.contract`), and
:func:`op_campaign` turns a campaign into one whose every program calls the ops 1 to 3 times
(:mod:`verification.userops.programs`), counting how often each ran at each break position.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import importlib.util
import shlex
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from verification.devices import DeviceKind, device_context, resolve_kind
from verification.errors import UsageError
from verification.execute import (
    BreakLog,
    CapturedProgram,
    run_eager,
    run_steps,
    seed_rng,
    step_callables,
)
from verification.findings import OP_BUG, OP_CONTRACT, Finding
from verification.fuzz import CampaignConfig, CampaignResult, report_findings
from verification.ops.spec import TensorMeta
from verification.oracle import compare, program_tolerance
from verification.programs import Program, make_inputs, op_table, produces_value
from verification.targets import DEFAULT_TARGET, Target, load_target
from verification.userops.contract import Case, broken, case_of, diagnose, recheck
from verification.userops.programs import (
    POSITIONS,
    UserOp,
    break_positions,
    op_catalog,
    op_programs,
    user_op,
    value_names,
)
from verification.userops.spec import TensorArg, load_spec

# Small base programs: the op is what varies.
DEFAULT_MAX_OPS, DEFAULT_MAX_BREAKS = 4, 2
# Drawn calls per contract check, unless a command says otherwise (at least 1).
CONTRACT_EXAMPLES = 5


def load_user_ops(refs: Sequence[str]) -> list[UserOp]:
    """Loads each ``MODULE:SPEC``; two specs of the same name are a usage error."""
    users = [user_op(load_spec(ref)) for ref in refs]
    names = [u.direct.name for u in users]
    if len(set(names)) != len(names):
        raise UsageError(f"two op specs share a name: {', '.join(names)}; set name= on one")
    return users


@dataclass
class Coverage:
    """Per user op: calls at each break position, and how many programs ran it."""

    users: Sequence[UserOp]
    programs: int = 0
    programs_with: dict[str, int] = field(default_factory=collections.Counter)
    calls: dict[str, int] = field(default_factory=collections.Counter)
    positions: dict[str, collections.Counter] = field(
        default_factory=lambda: collections.defaultdict(collections.Counter)
    )

    def observe(self, program: Program) -> None:
        self.programs += 1
        for user in self.users:
            found = break_positions(program, {user.direct.name, user.nested.name})
            name = user.direct.name
            self.programs_with[name] += bool(found)
            self.calls[name] += len(found)
            for where in found:
                self.positions[name].update(where)

    def lines(self) -> list[str]:
        lines = []
        for user in self.users:
            name = user.direct.name
            counts = ", ".join(f"{p} {self.positions[name][p]}" for p in POSITIONS)
            lines.append(
                f"op {user.loaded.ref}: ran in {self.programs_with[name]} of {self.programs} "
                f"programs, {self.calls[name]} calls; by break position: {counts}"
            )
        return lines

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {
            u.loaded.ref: {
                "programs": self.programs,
                "programs_with_op": self.programs_with[u.direct.name],
                "calls": self.calls[u.direct.name],
                **{p: self.positions[u.direct.name][p] for p in POSITIONS},
            }
            for u in self.users
        }


def command_line(
    specs: Sequence[str], config: CampaignConfig, contract_examples: int = CONTRACT_EXAMPLES
) -> str:
    """The ``fuzz-op`` command that reruns this campaign (and so reproduces its finding)."""
    target, kind = config.target, config.kind
    return (
        f"python -m verification fuzz-op {' '.join(shlex.quote(s) for s in specs)} "
        f"--target {target.name} --contract {target.contract.name} --device {kind} "
        f"--seed {config.seed} --examples {config.examples} --max-ops {config.max_ops} "
        f"--max-breaks {config.max_breaks} --replays {config.replays} "
        f"--contract-examples {contract_examples}"
    )


def op_campaign(
    base: CampaignConfig,
    specs: Sequence[str],
    users: Sequence[UserOp],
    contract_examples: int = CONTRACT_EXAMPLES,
) -> tuple[CampaignConfig, Coverage]:
    """``base`` (its target, kind, sizes and budget) with programs that call ``users``, and
    the coverage counter that sees each program; ``specs`` are the refs the reproducer's
    command names."""
    coverage = Coverage(users)
    config = dataclasses.replace(
        base,
        ops=op_catalog(users),
        strategy=op_programs(
            users,
            max_ops=base.max_ops,
            max_breaks=base.max_breaks,
            contract=base.target.contract,
        ),
        observe=coverage.observe,
        command_line=command_line(specs, base, contract_examples),
    )
    return config, coverage


def _as_replayed(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as a perfect capture replays a break: every call after the first gets the first
    call's tensors, holding the new values as replayed kernels write them (no version counter
    moves), and what it writes there reaches the caller's tensors."""
    held: list[tuple[Any, ...]] = []

    @functools.wraps(fn)
    def replayed(*args: Any, **kwargs: Any) -> Any:
        if not held:
            held.append(args)
            return fn(*args, **kwargs)
        static = held[0]
        tensors = [
            (kept, given)
            for kept, given in zip(static, args)
            if isinstance(kept, torch.Tensor) or isinstance(given, torch.Tensor)
        ]
        if len(static) != len(args) or not all(
            isinstance(kept, torch.Tensor)
            and isinstance(given, torch.Tensor)
            and (kept.shape, kept.dtype) == (given.shape, given.dtype)
            for kept, given in tensors
        ):
            return fn(*args, **kwargs)  # other arguments than at capture: not its replay
        pairs = [(kept, given) for kept, given in tensors if kept is not given]
        for kept, given in pairs:
            kept.data.copy_(given)
        result = fn(*static, **kwargs)
        for kept, given in pairs:
            given.copy_(kept)
        return result

    return replayed


def _eager_runs_differ(
    program: Program, table: dict, seed: int, device: str, kind: DeviceKind
) -> str | None:
    """Where two eager runs of ``program`` on the same inputs differ, each building its
    break callables afresh (a user op's module freshly imported), or None."""
    tol = program_tolerance(program, table)
    runs = [
        run_eager(program, table, make_inputs(program, seed, device), seed, kind) for _ in range(2)
    ]
    for index, (a, b) in enumerate(zip(*runs)):
        problem = compare(a, b, tol)
        if problem is not None:
            return f"output {index}: {problem}"
    return None


def _ideal_replay_mismatch(
    program: Program, table: dict, seed: int, replays: int, device: str, kind: DeviceKind
) -> str | None:
    """Replays ``program`` as a perfect capture would, by running it eagerly again on the
    static buffers with the same break callables (so the same op module state), and
    compares each replay with a fresh eager reference: a difference is the op's alone."""
    tol = program_tolerance(program, table)
    callables = step_callables(program, table, _as_replayed, BreakLog())
    static = [x.clone() for x in make_inputs(program, seed, device)]
    for _ in range(2):  # the warm-up call, then the capture's
        seed_rng(seed, kind)
        run_steps(program, table, callables, static)
    for replay in range(replays):
        replay_seed = seed + 1 + replay
        fresh = make_inputs(program, replay_seed, device)
        expected = run_eager(program, table, fresh, replay_seed, kind)
        for buffer, value in zip(static, fresh):
            buffer.copy_(value)
        seed_rng(replay_seed, kind)
        outputs = run_steps(program, table, callables, static)
        for index, (actual, want) in enumerate(zip(outputs, expected)):
            problem = compare(actual, want, tol)
            if problem is not None:
                return f"replay {replay}, output {index}: {problem}"
    return None


def _raised_in(error: BaseException, files: set[Path]) -> bool:
    """Whether ``error``'s innermost frame (torch and the simulator aside) is in ``files``."""
    # The simulator raises on behalf of the code that called it: look past it too.
    skipped = (Path(torch.__file__).parent, Path(__file__).resolve().parents[1] / "sim")
    frames = [
        Path(f.filename).resolve()
        for f in traceback.extract_tb(error.__traceback__)
        if not any(Path(f.filename).resolve().is_relative_to(d) for d in skipped)
    ]
    return bool(frames) and frames[-1] in files


def _first(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def _watched(table: dict, users: Sequence[UserOp]) -> dict:
    """``table`` with each user op's result watched for aliasing an argument at each call."""
    watched = dict(table)
    for user in users:
        for op in (user.direct, user.nested):
            watched[op.name] = dataclasses.replace(op, alias_varies=True)
    return watched


def _raised_in_op(
    program: Program,
    table: dict,
    target: Target,
    seed: int,
    replays: int,
    device: str,
    kind: DeviceKind,
    files: set[Path],
    names: set[str],
) -> str | None:
    """Captures and replays ``program`` again; a refusal by the target of a user op's result
    that aliased an argument at one call and not at another is the op's, and so is an
    exception whose innermost frame (torch and the simulator aside) is in a user op's module."""
    where = "at capture"
    captured = None
    try:
        captured = CapturedProgram(
            program, table, target, make_inputs(program, seed, device), seed, kind
        )
        for replay in range(replays):
            where = f"at replay {replay}"
            captured.replay(make_inputs(program, seed + 1 + replay, device), seed + 1 + replay)
    except Exception as error:
        switched = sorted(
            step
            for step in (captured.alias_switched if captured is not None else ())
            if program.steps[step].op in names
        )
        if captured is not None and switched:
            at_capture = bool(captured.capture_aliased.get(switched[0]))
            what = {True: "an argument itself", False: "a new tensor"}
            return (
                f"its result is {what[at_capture]} at capture and {what[not at_capture]} "
                f"{where} (step {switched[0]}), and the capture library refuses that: the "
                f"graphs after the break read the result through its capture-time memory, "
                f"which a result switching between an argument and a new tensor cannot keep. "
                f"The library says: {_first(error)}. Return the argument every time, or a new "
                f"tensor every time (x.clone() when there is nothing to do)"
            )
        if _raised_in(error, files):
            if where == "at capture":
                return (
                    f"the op raised {_first(error)} at capture, where it runs on buffers no "
                    f"kernel has filled yet (capture-time garbage): its inputs computed by the "
                    f"graph segment before the break hold other values at capture than at "
                    f"replay. Treat values it reads there as untrusted (clamp indices and "
                    f"sizes, skip what is out of range) and never raise, allocate or loop by "
                    f"them unchecked"
                )
            return f"the op raised {_first(error)} {where}"
    return None


def _call_shapes(program: Program, table: dict, names: set[str]) -> str:
    """The user op's calls in ``program``, in order, with their arguments' shapes."""
    metas = list(program.inputs)
    calls = []
    for index, step in enumerate(program.steps):
        spec = table[step.op]
        args = [metas[a] for a in step.args]
        if step.op in names:
            shapes = ", ".join(str(tuple(m.shape)) for m in args)
            calls.append(f"step {index} on shapes {shapes}")
        if produces_value(spec):
            metas.append(spec.infer(args, step.kwargs))
    return "; ".join(calls)


def op_fault(
    finding: Finding, users: Sequence[UserOp], target: Target, kind: str, replays: int
) -> str | None:
    """Why a campaign finding is the user op's fault and not the target's, or None.

    A mismatch that a perfect capture (running the program again eagerly, keeping the op's
    module state) shows too comes from state the op keeps across calls; an exception raised
    inside the op's own code is the op's.
    """
    program = finding.program
    names = {op.name for u in users for op in (u.direct, u.nested)}
    if program is None or finding.seed is None:
        return None
    if not any(step.op in names for step in program.steps):
        return None
    table = op_table(op_catalog(users))
    files = {Path(u.loaded.path).resolve() for u in users if u.loaded.path is not None}
    with device_context(kind) as device:
        if finding.violation == "exception":
            try:
                _ideal_replay_mismatch(program, table, finding.seed, replays, device, kind)
            except Exception as error:
                if _raised_in(error, files):
                    return (
                        "the op keeps state across calls: run again eagerly with the same op "
                        "(warm-up, capture, replays, as a perfect capture calls it) the program "
                        f"raises {_first(error)} in the op's code, where a first run passes. "
                        f"Its calls, in order: {_call_shapes(program, table, names)}. State "
                        "built at one call's sizes (offsets, a workspace, a shape) and sliced "
                        "at another's breaks: rebuild it when the sizes change, or pass it in"
                    )
        if finding.violation == "mismatch":
            varies = _eager_runs_differ(program, table, finding.seed, device, kind)
            if varies is not None:
                return (
                    "the op is not deterministic: two eager runs of the program on the same "
                    f"inputs, each with the op freshly imported, already differ ({varies}), "
                    "so no replay can equal an eager run. Make it deterministic (a stable "
                    "order, a generator the caller seeds)"
                )
            seen = _ideal_replay_mismatch(program, table, finding.seed, replays, device, kind)
            if seen is not None:
                return (
                    "the op keeps state across calls: a program run again eagerly with the "
                    "same op (as a perfect capture replays it) already differs from a first "
                    f"run ({seen}). It freezes a host value or stashes a tensor at its first "
                    "call, the capture; read inputs afresh on every call"
                )
        if finding.violation == "exception":
            watched = _watched(table, users)
            return _raised_in_op(
                program, watched, target, finding.seed, replays, device, kind, files, names
            )
    return None


def name_arguments(finding: Finding, users: Sequence[UserOp]) -> Finding:
    """``finding`` with the output it concerns named as the spec names it."""
    if finding.index is None or finding.program is None:
        return finding
    value = finding.program.outputs[finding.index]
    name = value_names(finding.program, users).get(value)
    old = f"output {finding.index} (value {value})"
    if name is None or old not in finding.message:
        return finding
    new = f"output {finding.index} (value {value}: {name})"
    return dataclasses.replace(finding, message=finding.message.replace(old, new, 1))


def settle_findings(
    result: CampaignResult, config: CampaignConfig, users: Sequence[UserOp]
) -> None:
    """Names outputs by the spec's arguments and blames the user's op for what is its fault
    (an ``op-bug``, never a target bug), then renders the reproducers again to match."""
    if not result.findings:
        return
    settled = []
    for finding in result.findings:
        finding = name_arguments(finding, users)
        names = {op.name for u in users for op in (u.direct, u.nested)}
        calls = [s.op for s in finding.program.steps if s.op in names] if finding.program else []
        reason = op_fault(finding, users, config.target, config.kind, config.replays)
        if reason is None and finding.kind == OP_CONTRACT and calls:
            reason = "the op broke the contract the target is judged by"
        if reason is not None:
            refs = sorted(
                {u.loaded.ref for u in users if {u.direct.name, u.nested.name} & set(calls)}
            )
            message = f"op {', '.join(refs)}: {reason}. Seen as: {finding.message}"
            finding = dataclasses.replace(finding, kind=OP_BUG, message=message)
        settled.append(finding)
    result.findings[:] = settled
    result.reproducers.clear()
    result.reproducer_paths.clear()
    report_findings(result, config)


def recheck_violation(
    ref: str,
    part: str,
    case: Case | None,
    device_choice: str,
    target: str = DEFAULT_TARGET,
    contract: str | None = None,
) -> Finding | None:
    """Checks one contract part of the op ``ref`` again: on the drawn ``case`` it broke on,
    or (no case) against the target's contract. A contract reproducer calls this: a process
    of its own, handed names, which it resolves here, once."""
    user = user_op(load_spec(ref))
    if case is None:
        found = _return_under(user, load_target(target, contract))
        return next((v for v in found if v.violation == part), None)
    with device_context(resolve_kind(device_choice)) as device:
        return recheck(user.loaded, part, case, device)


def _case_source(case: Case) -> str:
    metas = ", ".join(f"TensorMeta({tuple(m.shape)!r}, {m.dtype})" for m in case.metas)
    fields = [
        f"binding={case.binding!r}",
        f"metas=({metas},)",
        f"params={case.params!r}",
        f"seed={case.seed}",
    ]
    if case.layouts:
        fields.append(f"layouts={case.layouts!r}")
    if case.after:
        fields.append(f"after=({', '.join(_case_source(c) for c in case.after)},)")
    return "Case(\n    " + ",\n    ".join(fields) + ",\n)"


def render_contract_reproducer(
    ref: str, violation: Finding, kind: str, command: str, target: Target
) -> str:
    """A standalone script that checks the broken part of ``ref``'s contract again (on the
    call it broke on) and exits non-zero while it is still broken."""
    summary = f"{violation.violation}: {violation.message}".replace('"""', "'")
    drawn = case_of(violation)
    case = "None" if drawn is None else _case_source(drawn)
    module = ref.partition(":")[0]
    root = str(Path.cwd())
    try:
        found = importlib.util.find_spec(module)
        if found is not None and found.origin is not None:
            root = str(Path(found.origin).resolve().parents[module.count(".")])
    except (ImportError, ValueError):
        pass
    return (
        f'"""Reproducer for an op finding in op {ref} ({kind}): contract part '
        f"{violation.violation!r} broken.\n\n{summary}\nFuzzer command: {command}\n"
        'Exits non-zero while the bug is present.\n"""\n\n'
        "import sys\n\nimport torch\n\n"
        f"if {root!r} not in sys.path:\n    sys.path.insert(0, {root!r})  # the op's module\n\n"
        f"from {Case.__module__} import Case  # noqa: E402\n"
        f"from {TensorMeta.__module__} import TensorMeta  # noqa: E402\n"
        f"from {__name__} import recheck_violation  # noqa: E402\n\n"
        f"CASE = {case}\n\n\n"
        "def main():\n"
        f"    violation = recheck_violation(\n        {ref!r}, {violation.violation!r}, CASE, "
        f"{kind!r}, {target.name!r}, {target.contract.name!r}\n    )\n"
        "    if violation is not None:\n"
        '        sys.exit(f"contract part {violation.violation} broken: {violation.message}")\n'
        '    print("reproducer passed: the op keeps this part of its contract")\n\n\n'
        'if __name__ == "__main__":\n    main()\n'
    )


def _return_under(user: UserOp, target: Target) -> list[Finding]:
    """A declared fresh return, when the target's contract never refreshes returns."""
    if not isinstance(user.spec.returns, TensorArg) or target.contract.refreshes_returns:
        return []
    return [
        broken(
            "declared return",
            f"it returns a fresh tensor, and target {target.name} is judged by the "
            f"{target.contract.name} contract, under which a returned tensor is never refreshed "
            f"at replay: graph segments after the break would read capture-time values. Write "
            f"the result into a caller-provided buffer declared in writes=.",
        )
    ]


def contract_violations(
    users: Sequence[UserOp], target: Target, kind: DeviceKind, examples: int, seed: int
) -> dict[str, list[Finding]]:
    """Each op's broken contract parts: the checks of :mod:`verification.userops.contract`."""
    with device_context(kind) as device:
        return {
            u.loaded.ref: _return_under(u, target) + diagnose(u.loaded, device, examples, seed)
            for u in users
        }
