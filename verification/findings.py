"""What a check found, in one type: :class:`Finding`, and who it blames, as data: the target,
the op the program ran, or the harness itself.

Every :class:`Finding` carries one of the kinds of :data:`FINDING_KINDS`. Only kinds with
``fails_certificate`` fail a target's certificate; others are reported and explained.
A new kind is one entry of :data:`FINDING_KINDS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verification.programs import Program


@dataclass(frozen=True)
class FindingKind:
    name: str
    fails_certificate: bool
    meaning: str
    # False for what the checker shows about the platform or a documented hazard, true of
    # every target alike; certificates list those as notes, apart from the target's findings.
    about_target: bool = True


TARGET_BUG = "target-bug"
OP_CONTRACT = "op-contract"
OP_BUG = "op-bug"
HARNESS_ERROR = "harness-error"
MEMORY_HELD = "memory-held"
KNOWN_UNSAFE = "known-unsafe"
TORCH_LIMIT = "torch-limit"
CALLER_DUTY = "caller-duty"
SKIPPED = "skipped"

# Every kind, in one table that no import fills: what it holds never depends on which
# checks were imported first. A new kind is one entry here.
FINDING_KINDS: dict[str, FindingKind] = {
    kind.name: kind
    for kind in (
        FindingKind(
            TARGET_BUG,
            True,
            "the target failed to capture or replay the program as eager execution runs it "
            "(wrong values, break calls or buffers, or an exception)",
        ),
        FindingKind(
            OP_CONTRACT,
            False,
            "a break in the program broke the contract the target is judged by "
            "(under out-buffer: later steps read a fresh tensor the break returned)",
        ),
        FindingKind(
            OP_BUG,
            True,
            "a user's break op under test (fuzz-op, certify --ops) broke its declared contract "
            "or kept state across calls; it fails the certificate that goes with the op",
        ),
        FindingKind(
            HARNESS_ERROR,
            False,
            "the harness itself failed (generator, eager reference or a check)",
        ),
        FindingKind(
            MEMORY_HELD,
            False,
            "the target is correct but keeps alive memory it could release (the figure says "
            "how much)",
        ),
        FindingKind(
            KNOWN_UNSAFE,
            False,
            "a documented hazard (replaying captures of one pool out of order), demonstrated "
            "by the checker; never a target bug",
            about_target=False,
        ),
        FindingKind(
            SKIPPED,
            False,
            "a check stopped early: a finding left the target unusable in this process, and "
            "what followed would only have reported that leftover",
        ),
        FindingKind(
            TORCH_LIMIT,
            False,
            "a limitation of torch or CUDA that no target can work around, shown by the "
            "checker; never a target bug",
            about_target=False,
        ),
        FindingKind(
            CALLER_DUTY,
            False,
            "the target relies on a duty its engine's runner fulfils under its contract "
            "(verification/contracts.py), so the checker fulfils it too, as that runner does; "
            "a note, not a bug",
        ),
    )
}
# Only a finding about the target can fail its certificate.
assert all(k.about_target or not k.fails_certificate for k in FINDING_KINDS.values())


def fails_certificate(kind: str) -> bool:
    return FINDING_KINDS[kind].fails_certificate


def about_target(kind: str) -> bool:
    return FINDING_KINDS[kind].about_target


@dataclass(frozen=True)
class Finding:
    """One observation of a check, whichever check made it.

    ``kind`` says whom it blames; ``check`` what found it (``fuzz``, a property's name, an
    op's contract); ``violation`` what broke when the check checks more than one thing
    (``mismatch``, ``break-count``, a contract part), None when the check is the property.
    ``program`` is the (shrunk) example when there is one, ``seed`` its input seed,
    ``replay_index`` and ``index`` the replay and the output or step it concerns, and
    ``scenario`` a property's witness (threads, streams, pools) beyond the program.
    """

    kind: str
    check: str
    message: str
    violation: str | None = None
    program: Program | None = None
    seed: int | None = None
    replay_index: int | None = None
    index: int | None = None
    scenario: tuple[tuple[str, Any], ...] = ()

    @property
    def fails(self) -> bool:
        return fails_certificate(self.kind)

    def summary(self) -> str:
        if self.violation is None:
            first = self.message.splitlines()[0] if self.message else ""
            return f"{self.check}: {self.kind}: {first}"
        where = "" if self.replay_index is None else f" (replay {self.replay_index})"
        return f"[{self.kind}] {self.violation}{where}: {self.message}"
