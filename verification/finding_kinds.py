"""Who a finding blames, as data: the target, the op the program ran, or the harness itself.

Every :class:`~verification.oracle.Finding` carries one of these kinds. Only kinds with
``fails_certificate`` fail a target's certificate; others are reported and explained.
Further checks add kinds with :func:`register_finding_kind`.
"""

from __future__ import annotations

from dataclasses import dataclass


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
HARNESS_ERROR = "harness-error"
OP_BUG = "op-bug"

FINDING_KINDS: dict[str, FindingKind] = {}


def register_finding_kind(
    name: str, fails_certificate: bool, meaning: str, about_target: bool = True
) -> FindingKind:
    """Adds a kind; registering the same name twice is a programming error."""
    assert name not in FINDING_KINDS, f"finding kind {name!r} is registered twice"
    assert about_target or not fails_certificate, "only a finding about the target can fail it"
    FINDING_KINDS[name] = FindingKind(name, fails_certificate, meaning, about_target)
    return FINDING_KINDS[name]


register_finding_kind(
    TARGET_BUG,
    True,
    "the target failed to capture or replay the program as eager execution runs it "
    "(wrong values, break calls or buffers, or an exception)",
)
register_finding_kind(
    OP_CONTRACT,
    False,
    "a break in the program broke the contract the target is judged by "
    "(under out-buffer: later steps read a fresh tensor the break returned)",
)
register_finding_kind(
    OP_BUG,
    True,
    "a user's break op under test (fuzz-op, certify --ops) broke its declared contract or "
    "kept state across calls; it fails the certificate that goes with the op",
)
register_finding_kind(
    HARNESS_ERROR, False, "the harness itself failed (generator, eager reference or a check)"
)


def fails_certificate(kind: str) -> bool:
    return FINDING_KINDS[kind].fails_certificate


def about_target(kind: str) -> bool:
    return FINDING_KINDS[kind].about_target
