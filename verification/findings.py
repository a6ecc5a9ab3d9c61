"""What a check found, in one type: :class:`Finding`, and who it blames, as data: the target,
the op the program ran, or the harness itself.

Every :class:`Finding` carries one of the kinds of :data:`FINDING_KINDS`. Only kinds with
``fails_certificate`` fail a target's certificate; others are reported and explained.
A new kind is one entry of :data:`FINDING_KINDS`. A finding also carries its cause as a value
(:attr:`Finding.cause`, a :class:`~verification.causes.Cause`), and :func:`root_causes` merges
the findings whose causes match, by whichever checks and in whatever words they came, into one
:class:`RootCause` that shows the most specific explanation: a bug is counted and listed once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from verification.causes import HUNG, Cause, raised_in
from verification.errors import EXIT_FOUND, EXIT_HARNESS, EXIT_OK
from verification.programs import Program
from verification.search import symptom


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
UNDECIDED = "undecided"

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
            UNDECIDED,
            False,
            "a question the check could not decide in this run (the allocator placed memory "
            "so that a demonstration could not show its hazard, or a capture left nothing to "
            "ask about); it says nothing for or against the target",
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
    ``scenario`` a property's witness (threads, streams, pools) beyond the program, and
    ``explained`` the cause the check named, where it named one (:attr:`cause`).
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
    explained: Cause | None = None

    @property
    def fails(self) -> bool:
        return fails_certificate(self.kind)

    @property
    def hung(self) -> bool:
        """Whether it is of a call into the target that did not return within its bound
        (:mod:`verification.bounds`)."""
        return self.cause.kind == HUNG.kind

    @property
    def where(self) -> str | None:
        """``path:line, in function`` of the code under test that raised, when an exception
        did (as :func:`verification.causes.describe` names it in the message)."""
        raised = raised_in(self.message)
        return None if raised is None else str(raised.frame)

    @property
    def cause(self) -> Cause:
        """What the finding blames: the cause its check named, with the frame of the target
        that raised where the message names one; else the exception and its frame; else only
        a symptom (kind ``other``), matched by the check and its words (:meth:`keys`)."""
        raised = raised_in(self.message)
        if self.explained is not None:
            return self.explained.with_frame(raised)
        if raised is not None:
            return Cause("raised", frame=raised.frame, exception=raised.exception)
        return Cause("other")

    def keys(self) -> tuple[tuple[str, ...], ...]:
        """The values this finding is merged by: its cause's; for a bare symptom, its check
        and symptom, or a program's violation and the shrunk program's shape."""
        keys = self.cause.keys()
        if not keys:
            if self.program is not None and self.violation is not None:
                shape = " ".join(f"{s.op}{'!' if s.brk else ''}" for s in self.program.steps)
                keys = ((self.violation, shape),)
            else:
                keys = ((self.check, symptom(self.message)),)
        return tuple((self.kind, *key) for key in keys)

    def summary(self) -> str:
        if self.violation is None:
            first = self.message.splitlines()[0] if self.message else ""
            return f"{self.check}: {self.kind}: {first}"
        where = "" if self.replay_index is None else f" (replay {self.replay_index})"
        return f"[{self.kind}] {self.violation}{where}: {self.message}"


@dataclass(frozen=True)
class RootCause:
    """One bug: ``finding``, the most specific explanation any check gave of it (the first
    found among equals), and every other finding of the same cause."""

    finding: Finding
    others: tuple[Finding, ...] = ()

    @property
    def seen_through(self) -> list[str]:
        """Every check that reached it, the one shown first, each once."""
        return list(dict.fromkeys(f.check for f in (self.finding, *self.others)))

    def also_line(self) -> str | None:
        """``also seen through: pool, threads``: the checks besides the first that reached it,
        when there are any."""
        others = self.seen_through[1:]
        return f"also seen through: {', '.join(others)}" if others else None


def root_causes(
    findings: Iterable[Finding], joins: Iterable[tuple[Finding, Finding]] = ()
) -> list[RootCause]:
    """The findings grouped by cause, in the order first found: two findings are one cause
    when they share a key (:meth:`Finding.keys`), directly or through a third, or when
    ``joins`` pairs them (a finding that does not persist once the other's cause is avoided,
    :mod:`verification.certify.persist`)."""
    found = list(findings)
    group_of: list[int] = list(range(len(found)))

    def root(i: int) -> int:
        while group_of[i] != i:
            group_of[i] = group_of[group_of[i]]
            i = group_of[i]
        return i

    first_with: dict[tuple[str, ...], int] = {}
    for number, finding in enumerate(found):
        for key in finding.keys():
            other = first_with.setdefault(key, number)
            a, b = sorted((root(number), root(other)))
            group_of[b] = a
    number_of = {id(f): n for n, f in enumerate(found)}
    for finding, joined in joins:
        if id(finding) in number_of and id(joined) in number_of:
            a, b = sorted((root(number_of[id(finding)]), root(number_of[id(joined)])))
            group_of[b] = a
    groups: dict[int, list[Finding]] = {}
    for number, finding in enumerate(found):
        groups.setdefault(root(number), []).append(finding)
    causes = []
    for group in groups.values():
        shown = max(group, key=lambda f: f.cause.rank)  # max keeps the first among equals
        causes.append(RootCause(shown, tuple(f for f in group if f is not shown)))
    return causes


def exit_status(findings: Iterable[Finding]) -> int:
    """A command's exit status for what it found: :data:`~verification.errors.EXIT_HARNESS`
    when the harness itself failed (what it found cannot be trusted then, whatever else it
    found), else :data:`~verification.errors.EXIT_FOUND` for a bug of the target or an op,
    else :data:`~verification.errors.EXIT_OK`."""
    kinds = {f.kind for f in findings}
    if HARNESS_ERROR in kinds:
        return EXIT_HARNESS
    return EXIT_FOUND if any(fails_certificate(k) for k in kinds) else EXIT_OK
