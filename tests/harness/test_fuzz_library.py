"""The fuzzer finds nothing wrong with the target (``--bcg-target``, default the shipped
library), and finds the PyPI package's published nested-op crash (a decorated op called inside
a decorated op). The budget is the profile's, cut into chunks that ``--bcg-shard`` deals out
to machines and xdist to workers.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from verification.errors import UsageError
from verification.fuzz import CampaignConfig, run_campaign
from verification.plugin.shard import FuzzChunk
from verification.targets import load_target


def test_fuzzer_finds_nothing_in_the_target(bcg_target, bcg_kind, bcg_fuzz_chunk: FuzzChunk):
    config = CampaignConfig(
        target=load_target(bcg_target),
        kind=bcg_kind,
        examples=bcg_fuzz_chunk.examples,
        seed=bcg_fuzz_chunk.seed,
    )
    result = run_campaign(config)
    assert result.examples > 0
    assert not result.findings, "\n".join([result.findings[0].summary(), *result.reproducers])


def test_fuzzer_finds_the_nested_op_crash_of_breakable_cuda_graphs(bcg_kind):
    pytest.importorskip("breakable_cuda_graphs")
    target = load_target("verification.targets.breakable_cuda_graphs")
    assert target.contract.name == "no-device-returns"
    result = run_campaign(CampaignConfig(target=target, kind=bcg_kind))
    assert result.findings, f"nested-op crash unnoticed in {result.examples} examples"
    finding = result.findings[0]
    assert finding.kind == "target-bug" and "AssertionError" in finding.message, finding.summary()


def test_target_missing_names_is_a_usage_error_naming_them():
    with pytest.raises(UsageError, match="eager_break_during_capture"):
        load_target(SimpleNamespace(BreakableCUDAGraphCapture=object))


def test_unknown_target_module_is_a_usage_error():
    with pytest.raises(UsageError, match="no_such_target_module"):
        load_target("no_such_target_module")
