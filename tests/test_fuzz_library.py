"""The fuzzer finds nothing wrong with the target (``--bcg-target``, default the shipped library),
nor with the PyPI package's adapter. The budget is the profile's, cut into chunks that
``--bcg-shard`` deals out to machines and xdist to workers.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from verification.devices import UsageError
from verification.fuzz import CampaignConfig, run_campaign
from verification.shard import FuzzChunk
from verification.targets import load_target


def test_fuzzer_finds_nothing_in_the_target(bcg_target, bcg_kind, bcg_fuzz_chunk: FuzzChunk):
    config = CampaignConfig(
        target=bcg_target,
        device=bcg_kind,
        examples=bcg_fuzz_chunk.examples,
        seed=bcg_fuzz_chunk.seed,
    )
    result = run_campaign(config)
    assert result.examples > 0
    assert not result.findings, "\n".join([result.findings[0].summary(), *result.reproducers])


def test_fuzzer_finds_nothing_in_the_breakable_cuda_graphs_adapter(
    bcg_kind, bcg_fuzz_chunk: FuzzChunk
):
    pytest.importorskip("breakable_cuda_graphs")
    target = "verification.targets.breakable_cuda_graphs"
    assert not load_target(target).supports_tensor_returns
    config = CampaignConfig(
        target=target, device=bcg_kind, examples=bcg_fuzz_chunk.examples, seed=bcg_fuzz_chunk.seed
    )
    result = run_campaign(config)
    assert not result.findings, "\n".join([result.findings[0].summary(), *result.reproducers])


def test_target_missing_names_is_a_usage_error_naming_them():
    with pytest.raises(UsageError, match="eager_break_during_capture"):
        load_target(SimpleNamespace(BreakableCUDAGraphCapture=object))


def test_unknown_target_module_is_a_usage_error():
    with pytest.raises(UsageError, match="no_such_target_module"):
        load_target("no_such_target_module")
