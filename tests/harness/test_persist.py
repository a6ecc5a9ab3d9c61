"""A cause is counted as a second bug only if it persists once the first is avoided: a raise
that needs another dtype joins the dtype cause, a check's example that fails alone as another
cause does joins it, and a bug that fails in its own way stays a cause of its own."""

from __future__ import annotations

import dataclasses

from verification.certify.persist import avoided_joins
from verification.findings import TARGET_BUG, root_causes
from verification.fuzz import CampaignConfig, run_campaign
from verification.planted import vllm_minimal
from verification.targets import load_target

# A seed whose campaign on the simulator finds the planted alias in the default dtype twice:
# a break handed float32 where it was given float16, and a capture that raises aliasing a
# one-byte tensor as float32.
SEED = 1


def _campaign(target, seed: int = SEED):
    config = CampaignConfig(target=load_target(target), kind="sim", examples=60, seed=seed)
    return config, run_campaign(config).findings


def test_a_raise_that_needs_another_dtype_joins_the_cause_of_the_dtype():
    config, findings = _campaign(vllm_minimal.build("alias_default_dtype"))
    kinds = [f.cause.kind for f in findings]
    assert kinds == ["handed-otherwise", "raised"], [f.message for f in findings]
    assert len(root_causes(findings)) == 2  # by their causes alone: two
    joins = avoided_joins(findings, config)
    assert [(a.cause.kind, b.cause.kind) for a, b in joins] == [("raised", "handed-otherwise")]
    (cause,) = root_causes(findings, joins)
    assert cause.finding.cause.involves.endswith("with another dtype")


def test_a_checks_example_that_fails_alone_as_another_cause_joins_it():
    config, findings = _campaign(vllm_minimal.build("alias_default_dtype"))
    dtype = findings[0]
    # The same example, as a property check would report it, in its own words and no cause.
    seen_by_pool = dataclasses.replace(
        dtype, check="pool", message="capture 0 of 2 sharing a pool: output 0 differs",
        violation=None, explained=None,
    )  # fmt: skip
    assert len(root_causes([dtype, seen_by_pool])) == 2
    joins = avoided_joins([dtype, seen_by_pool], config)
    assert joins == [(seen_by_pool, dtype)]
    assert len(root_causes([dtype, seen_by_pool], joins)) == 1


def test_a_bug_that_fails_in_its_own_way_persists_beside_another():
    target = vllm_minimal.build(("alias_default_dtype", "kwargs_dropped"))
    config, findings = _campaign(target, seed=3)
    failing = [f for f in findings if f.kind == TARGET_BUG]
    causes = root_causes(failing, avoided_joins(failing, config))
    involves = [c.finding.cause.involves for c in causes]
    assert any(words.endswith("with another dtype") for words in involves), involves
    assert any("keyword" in c.finding.message for c in causes), [c.finding.message for c in causes]
