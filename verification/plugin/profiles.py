"""The budgets the harness runs under, by name: one table for ``certify --profile`` and the
pytest plugin's ``--bcg-profile``.

``certify`` takes every number of a :class:`Profile`; the plugin only ``examples``, as the
hypothesis profile ``bcg-NAME``. A name is offered where its tuple below lists it. Under a
``budget_s`` the example counts are caps, and the budget of wall-clock seconds is what ends
the checks.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    examples: int
    max_ops: int = 8
    max_breaks: int = 3
    replays: int = 3
    # certify's wall-clock budget for its checks, in seconds (None: the example budget alone).
    budget_s: float | None = None


PROFILES: dict[str, Profile] = {
    "ci": Profile(examples=25),
    "quick": Profile(examples=50, max_ops=8, max_breaks=3, replays=3, budget_s=10.0),
    "dev": Profile(examples=200),
    "standard": Profile(examples=5000, max_ops=12, max_breaks=4, replays=3, budget_s=40.0),
    "thorough": Profile(examples=2000, max_ops=16, max_breaks=6, replays=4),
}
# What each name is for, shown in certify's and the plugin's help.
PROFILE_MEANINGS: dict[str, str] = {
    "ci": "a quick smoke run for every push",
    "quick": "a smoke test: does the target run under the harness at all",
    "dev": "a developer's run before review",
    "standard": "the evidence a pull request needs",
    "thorough": "before a release, on the GPU: long programs, 10,000 repetition cycles",
}
CERTIFY_PROFILES = ("quick", "standard", "thorough")
DEFAULT_CERTIFY_PROFILE = "standard"
PYTEST_PROFILES = ("ci", "dev", "thorough")
