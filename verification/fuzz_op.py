"""``python -m verification fuzz-op MODULE:SPEC ...``: fuzz a user's break op in captured programs.

It checks each op against its declared contract (:mod:`verification.opcontract`), then
runs a campaign whose every program calls the ops 1 to 3 times (:mod:`verification.opprograms`),
and reports how often each op ran at each break position. Exit 0: clean; 1: a contract
violation or a finding (with a reproducer that imports the user's module); 2: bad input.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from verification.cli_support import campaign_config as shared_campaign_config
from verification.cli_support import print_findings, writable_dir
from verification.contracts import get_contract
from verification.devices import UsageError, device_context, resolve_device
from verification.fuzz import CampaignConfig, run_campaign, run_isolated
from verification.opcontract import Violation, diagnose
from verification.opprograms import (
    POSITIONS,
    UserOp,
    break_positions,
    op_catalog,
    op_programs,
    user_op,
)
from verification.opspec import TensorArg, load_spec
from verification.programs import Program
from verification.targets import Target, load_target

DEFAULT_MAX_OPS, DEFAULT_MAX_BREAKS = 4, 2


def add_parser(commands: argparse._SubParsersAction, common: Callable[..., None]) -> None:
    """Registers ``fuzz-op`` with the CLI's shared options (``common`` adds them)."""
    parser = commands.add_parser(
        "fuzz-op",
        help="fuzz a break op of yours inside random captured programs",
        description=__doc__,
    )
    parser.add_argument("specs", nargs="+", metavar="MODULE:SPEC", help="a BreakOpSpec")
    common(parser, True)
    parser.set_defaults(max_ops=DEFAULT_MAX_OPS, max_breaks=DEFAULT_MAX_BREAKS)
    parser.add_argument("--report", type=Path, help="directory for reproducer scripts")
    parser.add_argument(
        "--contract-examples",
        type=int,
        default=5,
        help="drawn calls per contract check (at least 1)",
    )
    parser.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--program-file", type=Path, help=argparse.SUPPRESS)


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


def command_line(args: argparse.Namespace, target: Target, kind: str) -> str:
    """The ``fuzz-op`` command that reruns this campaign (and so reproduces its finding)."""
    return (
        f"python -m verification fuzz-op {' '.join(shlex.quote(s) for s in args.specs)} "
        f"--target {target.name} --contract {target.contract.name} --device {kind} --seed {args.seed} --examples {args.examples} "
        f"--max-ops {args.max_ops} --max-breaks {args.max_breaks} --replays {args.replays}"
    )


def campaign_config(
    args: argparse.Namespace, users: Sequence[UserOp], target: Target, kind: str
) -> tuple[CampaignConfig, Coverage]:
    coverage = Coverage(users)
    config = dataclasses.replace(
        shared_campaign_config(args, args.report),
        ops=op_catalog(users),
        strategy=op_programs(
            users,
            max_ops=args.max_ops,
            max_breaks=args.max_breaks,
            contract=target.contract,
        ),
        observe=coverage.observe,
        command_line=command_line(args, target, kind),
    )
    return config, coverage


def _return_under(user: UserOp, target: Target) -> list[Violation]:
    """A declared fresh return, when the target's contract never refreshes returns."""
    if not isinstance(user.spec.returns, TensorArg) or target.contract.refreshes_returns:
        return []
    return [
        Violation(
            "declared return",
            f"it returns a fresh tensor, and target {target.name} is judged by the "
            f"{target.contract.name} contract, under which a returned tensor is never refreshed "
            f"at replay: graph segments after the break would read capture-time values. Write "
            f"the result into a caller-provided buffer declared in writes=.",
        )
    ]


def contract_violations(
    users: Sequence[UserOp], target: Target, kind: str, examples: int, seed: int
) -> dict[str, list[Violation]]:
    """Each op's broken contract parts: the checks of :mod:`verification.opcontract`."""
    with device_context(kind) as device:
        return {
            u.loaded.ref: _return_under(u, target) + diagnose(u.loaded, device, examples, seed)
            for u in users
        }


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    if args.contract_examples < 1:
        raise UsageError(
            f"--contract-examples {args.contract_examples}: need at least 1; the contract "
            f"checks cannot be skipped"
        )
    kind = resolve_device(args.device)
    if args.contract is not None:
        get_contract(args.contract)
    target = load_target(args.target, args.contract)
    users = load_user_ops(args.specs)
    writable_dir(args.report, "--report")
    config, coverage = campaign_config(args, users, target, kind)
    isolate = args.isolate if args.isolate is not None else kind == "cuda"
    if isolate:
        status, crashed = run_isolated(list(argv), config)
        if crashed is not None:
            print_findings(crashed)
        return status
    violations = contract_violations(users, target, kind, args.contract_examples, args.seed)
    for ref, found in violations.items():
        print(f"contract of {ref}: {'BROKEN' if found else 'kept'} ({len(found)} violations)")
        for violation in found:
            print(f"  CONTRACT {violation.line()}")
    result = run_campaign(config)
    print_findings(result)
    for line in coverage.lines():
        print(line)
    broken = sum(len(v) for v in violations.values())
    print(f"{result.summary_line().replace('fuzz:', 'fuzz-op:', 1)}, {broken} contract violations")
    return 1 if broken or result.findings else 0
