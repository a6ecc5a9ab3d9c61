"""Each command loads its target once and passes the loaded target down: no check re-imports
it from its name."""

from __future__ import annotations

import pytest

from tests import counting_target
from verification.commands.cli import main

TARGET = "tests.counting_target"


@pytest.mark.parametrize(
    "command",
    [
        ["fuzz", "--examples", "3", "--no-isolate"],
        ["fuzz-op", "examples.masked_compaction:SPEC", "--examples", "3", "--no-isolate"],
        ["certify", "--profile", "quick", "--examples", "3", "--no-sensitivity", "--out"],
    ],
    ids=lambda command: command[0],
)
def test_a_command_loads_its_target_once(command, tmp_path, monkeypatch, bcg_kind):
    monkeypatch.setattr(counting_target, "LOADS", 0)
    if command[-1] == "--out":
        command = [*command, str(tmp_path)]
    assert main([*command, "--target", TARGET, "--device", bcg_kind]) == 0
    assert counting_target.LOADS == 1


def test_a_campaign_takes_a_loaded_target_never_a_name():
    from verification.fuzz import CampaignConfig

    with pytest.raises(TypeError, match="load_target"):
        CampaignConfig(target="breakable_cudagraph", kind="sim")
