"""The fuzzer finds every planted bug in what a break sees at replay (the ambient state its
region set, the runner's own metadata, its tensors' attributes) or in how its function may be
defined (a method, a partial), and names it as such."""

from __future__ import annotations

import pytest

from verification.fuzz import CampaignConfig, run_campaign
from verification.planted.library_targets import BUGS, build
from verification.targets import load_target

# What the finding must say: the cause, not just that an output differs.
NAMED_BY = {
    "ambient_not_restored": "ran at replay under",
    "only_autocast_restored": "ran at replay under",
    "caller_container_copied": "is the runner's own",
    "attributes_dropped": "with attributes [bcg_tag]",
    "decorator_without_binding": "defined as a method of a torch.nn.Module",
    "break_named_by_its_function": "defined as a",
}


@pytest.mark.parametrize("bug", BUGS)
def test_a_break_seeing_otherwise_at_replay_is_found_and_named(bcg_kind, bug):
    # On the simulator seeds 0-3 found each within 4 to 216 examples; seed 1 within 12.
    config = CampaignConfig(
        target=load_target(build(bug)), kind=bcg_kind, examples=400, seed=1, verdict_only=True,
        database=None,
    )  # fmt: skip
    result = run_campaign(config)
    assert result.findings, f"{bug} ({BUGS[bug][0]}) unnoticed in {result.examples} examples"
    assert NAMED_BY[bug] in result.findings[0].message, result.findings[0].summary()
