"""A user's break ops fuzzed in captured programs: what ``fuzz-op`` and ``certify --ops`` run.

:func:`load_user_ops` loads the ``MODULE:SPEC`` refs, :func:`contract_violations` checks each
op against its declared contract (:mod:`verification.userops.contract`), and
:func:`op_campaign` turns a campaign into one whose every program calls the ops 1 to 3 times
(:mod:`verification.userops.programs`), counting how often each ran at each break position.
"""

from __future__ import annotations

import collections
import dataclasses
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from verification.devices import device_context
from verification.errors import UsageError
from verification.findings import Finding
from verification.fuzz import CampaignConfig
from verification.programs import Program
from verification.targets import Target
from verification.userops.contract import broken, diagnose
from verification.userops.programs import (
    POSITIONS,
    UserOp,
    break_positions,
    op_catalog,
    op_programs,
    user_op,
)
from verification.userops.spec import TensorArg, load_spec

# Small base programs: the op is what varies.
DEFAULT_MAX_OPS, DEFAULT_MAX_BREAKS = 4, 2


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


def command_line(specs: Sequence[str], config: CampaignConfig, target: Target, kind: str) -> str:
    """The ``fuzz-op`` command that reruns this campaign (and so reproduces its finding)."""
    return (
        f"python -m verification fuzz-op {' '.join(shlex.quote(s) for s in specs)} "
        f"--target {target.name} --contract {target.contract.name} --device {kind} "
        f"--seed {config.seed} --examples {config.examples} --max-ops {config.max_ops} "
        f"--max-breaks {config.max_breaks} --replays {config.replays}"
    )


def op_campaign(
    base: CampaignConfig, specs: Sequence[str], users: Sequence[UserOp], target: Target, kind: str
) -> tuple[CampaignConfig, Coverage]:
    """``base`` (its sizes and budget) with programs that call ``users``, and the coverage
    counter that sees each program; ``specs`` are the refs the reproducer's command names."""
    coverage = Coverage(users)
    config = dataclasses.replace(
        base,
        ops=op_catalog(users),
        strategy=op_programs(
            users, max_ops=base.max_ops, max_breaks=base.max_breaks, contract=target.contract
        ),
        observe=coverage.observe,
        command_line=command_line(specs, base, target, kind),
    )
    return config, coverage


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
    users: Sequence[UserOp], target: Target, kind: str, examples: int, seed: int
) -> dict[str, list[Finding]]:
    """Each op's broken contract parts: the checks of :mod:`verification.userops.contract`."""
    if examples <= 0:
        return {u.loaded.ref: _return_under(u, target) for u in users}
    with device_context(kind) as device:
        return {
            u.loaded.ref: _return_under(u, target) + diagnose(u.loaded, device, examples, seed)
            for u in users
        }
