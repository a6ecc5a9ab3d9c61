"""The budgets the harness runs under, by name: one table for ``certify --profile`` and the
pytest plugin's ``--bcg-profile``.

``certify`` takes all four numbers of a :class:`Profile`; the plugin only ``examples``, as
the hypothesis profile ``bcg-NAME``. A name is offered where its tuple below lists it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    examples: int
    max_ops: int = 8
    max_breaks: int = 3
    replays: int = 3


PROFILES: dict[str, Profile] = {
    "ci": Profile(examples=25),
    "quick": Profile(examples=50, max_ops=8, max_breaks=3, replays=3),
    "dev": Profile(examples=200),
    "standard": Profile(examples=300, max_ops=12, max_breaks=4, replays=3),
    "thorough": Profile(examples=2000, max_ops=16, max_breaks=6, replays=4),
}
CERTIFY_PROFILES = ("quick", "standard", "thorough")
DEFAULT_CERTIFY_PROFILE = "standard"
PYTEST_PROFILES = ("ci", "dev", "thorough")
