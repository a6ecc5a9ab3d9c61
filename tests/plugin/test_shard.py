"""Sharding the fuzz budget: shards of any count are disjoint and together are the
unsharded plan, and a chunk's campaign depends on the chunk alone. Also the shared
example database (``BCG_HYPOTHESIS_DB``) replaying a finding first on another runner."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

import verification.fuzz
from verification.errors import UsageError
from verification.fuzz import CampaignConfig, run_campaign
from verification.planted.targets import build
from verification.plugin.shard import CHUNK_EXAMPLES, Shard, parse_shard, plan, select
from verification.targets import load_target


@given(st.integers(0, 20 * CHUNK_EXAMPLES), st.integers(0, 2**32), st.integers(1, 12))
def test_shards_are_disjoint_and_their_union_is_the_plan(budget, seed, count):
    whole = plan(budget, seed)
    parts = [select(whole, Shard(i, count)) for i in range(count)]
    assert sorted((c for part in parts for c in part), key=lambda c: c.index) == whole
    assert sum(c.examples for c in whole) == budget
    assert len({c.seed for c in whole}) == len(whole)


def test_plan_does_not_depend_on_the_shard_count():
    assert plan(200, 7) == plan(200, 7)
    assert [c.seed for c in plan(50, 7)] == [c.seed for c in plan(200, 7)][:2]
    assert plan(200, 7) != plan(200, 8)


@given(st.sampled_from(["", "1", "2/2", "-1/2", "a/b", "1/0", "0/1/2", " 0/1"]))
def test_malformed_shard_is_a_usage_error(text):
    try:
        parse_shard(text)
    except UsageError as error:
        assert "--bcg-shard" in str(error)
    else:
        raise AssertionError(f"{text!r} was accepted")


def test_well_formed_shard_parses():
    assert parse_shard("2/5") == Shard(2, 5) and str(parse_shard("0/1")) == "0/1"


def _programs_seen(monkeypatch, seed: int, examples: int) -> list[str]:
    seen: list[str] = []

    def record(program, target, device, input_seed, *rest):
        seen.append(repr((program, input_seed)))

    monkeypatch.setattr(verification.fuzz, "check_program", record)
    run_campaign(CampaignConfig(kind="sim", seed=seed, examples=examples, database=None))
    return seen


def test_a_chunks_campaign_is_a_function_of_the_chunk(monkeypatch):
    chunk, other = plan(50, 0)
    first = _programs_seen(monkeypatch, chunk.seed, chunk.examples)
    assert first == _programs_seen(monkeypatch, chunk.seed, chunk.examples)
    assert first != _programs_seen(monkeypatch, other.seed, other.examples)


def test_shared_database_replays_a_finding_first_on_another_runner(bcg_kind, tmp_path):
    target = load_target(build("eager_reordered"))

    def runner(seed: int, examples: int, database):
        config = CampaignConfig(target=target, kind=bcg_kind, seed=seed, examples=examples)
        config.database = database
        return run_campaign(config)

    # Control: one example under this seed does not find the bug without the database.
    assert not runner(1234, 1, None).findings
    shared = DirectoryBasedExampleDatabase(tmp_path / "db")
    assert runner(0, 25, shared).findings
    assert runner(1234, 1, shared).findings


def test_bcg_hypothesis_db_is_the_campaigns_default_database(monkeypatch, tmp_path):
    monkeypatch.setenv("BCG_HYPOTHESIS_DB", str(tmp_path))
    database = CampaignConfig().database
    assert isinstance(database, DirectoryBasedExampleDatabase) and database.path == tmp_path
    monkeypatch.delenv("BCG_HYPOTHESIS_DB")
    assert CampaignConfig().database is None
