"""Capture sets, streams and the engine scenario: the library replays every batch size of one
pool in any order on any stream as eager does, and the checks find the planted bugs of each
dimension: a replay running the newest capture's breaks (pool), the caller's stream left
changed and eager steps replayed on the capture's stream (stream-order), and aliases cached
per address across batch sizes (engine), and a capture-set API slicing its static buffers one
row down for its smallest size, returning a padded batch's outputs unsliced or capturing
each size into a pool of its own (engine). A capture set is drawn, shrunk and printed in a
reproducer that stands alone."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.harness.properties.test_program_reproducers import PROGRAM, _fails_on_the_planted_bug
from tests.property_checks import check, failing
from verification.findings import Finding
from verification.planted import vllm_minimal
from verification.planted.property_targets import build
from verification.properties import engine
from verification.properties.base import CheckConfig, Findings
from verification.properties.capture_set import CaptureSet, capture_set_problem, capture_sets
from verification.properties.engine import (
    CANONICAL,
    SWEEP_SIZES,
    engine_problem,
    every_history,
    sweep_problem,
)
from verification.targets import load_target

SET = CaptureSet(
    sizes=(3, 1), replays=(1, 0), remake=(1,), capture_stream="given", replay_stream="other"
)


@given(capture_sets())
@settings(max_examples=20, deadline=None)
def test_a_drawn_capture_set_captures_largest_first_and_replays_only_captured_sizes(drawn):
    assert list(drawn.sizes) == sorted(set(drawn.sizes), reverse=True)
    assert all(0 <= i < len(drawn.sizes) for i in drawn.replays + drawn.remake)
    assert not drawn.remake or len(drawn.sizes) > 1  # one capture always holds the pool


def test_the_library_replays_a_capture_set_as_eager_on_every_stream(bcg_kind, bcg_device):
    config = CheckConfig(load_target("breakable_cudagraph"), bcg_kind, bcg_device, 1)
    for replay_stream in ("default", "runner", "other"):
        for capture_stream in ("runner", "given"):
            capture_set = CaptureSet((4, 2, 1), (2, 0, 1), (0,), capture_stream, replay_stream)
            assert capture_set_problem(PROGRAM, capture_set, config) is None


def test_the_engine_scenario_replays_as_eager_on_the_library(bcg_kind, bcg_device):
    config = CheckConfig(load_target("breakable_cudagraph"), bcg_kind, bcg_device, 1)
    assert engine_problem(CANONICAL, config) is None


@given(st.lists(st.integers(1, 64), min_size=1, max_size=6, unique=True), st.integers(1, 3))
@settings(max_examples=40, deadline=None)
def test_every_history_of_calls_is_walked_once(batches, length):
    calls = every_history(batches, length)
    runs = [tuple(calls[i : i + length]) for i in range(len(calls) - length + 1)]
    assert len(runs) == len(set(runs)) == len(batches) ** length
    assert set(calls) == set(batches) and calls[0] == batches[0]


def test_the_librarys_capture_set_api_replays_every_drawn_size_as_eager(bcg_kind, bcg_device):
    config = CheckConfig(load_target("breakable_cudagraph"), bcg_kind, bcg_device, 1)
    assert config.target.capture_set is not None
    for sizes in ((1,), (4, 2), (4, 3, 1)):
        assert sweep_problem(sizes, config) is None, sizes


def test_a_capture_set_given_the_callers_own_buffers_is_checked_as_such(bcg_kind, bcg_device):
    config = CheckConfig(
        load_target(build("capture_set_copy_skipped_for_the_same_inputs")), bcg_kind, bcg_device, 1
    )
    problem = sweep_problem(SWEEP_SIZES, config, caller_buffers=True)
    assert problem is not None and "inputs sliced from the caller's buffers" in problem, problem
    clean = CheckConfig(load_target("breakable_cudagraph"), bcg_kind, bcg_device, 1)
    assert sweep_problem(SWEEP_SIZES, clean, history=3, caller_buffers=True, pad_value=-1) is None


def test_a_runner_or_capture_set_cause_is_one_finding_whatever_call_showed_it():
    def key(message: str) -> object:
        return engine._key(Finding(kind="target-bug", check="engine", message=message))

    runner = (
        "the runner's call at batch 3 after batches [4, 4], inputs sliced from the caller's "
        "buffers raised RuntimeError('The size of tensor a (4) must match the size of tensor b')",
        "the runner's call at batch 2 first raised RuntimeError('another text')",
    )
    assert key(runner[0]) == key(runner[1])
    differs = (
        "the runner's call at batch 1 after batches [2]: the logits differ from eager (largest "
        "difference 3.62)",
        "the runner's call at batch 4 first: the logits differ from eager (largest difference 1)",
    )
    assert key(differs[0]) == key(differs[1]) != key(runner[0])
    sets = (
        "a call of the capture set at batch 1 after batches [1, 4] (sizes (4, 2), inputs sliced "
        "from the caller's buffers): the breaks of the captured size 2 were given rows 1 to 1",
        "a call of the capture set at batch 3 after batches [5] (sizes (4, 2)): the breaks of the "
        "captured size 4 were given rows 3 to 3",
    )
    assert key(sets[0]) == key(sets[1])


def test_a_fixed_scenario_finding_carries_the_seed_its_model_was_built_from(bcg_kind, bcg_device):
    target = load_target(build("capture_set_pads_with_zero"))
    found = Findings(engine.NAME, CheckConfig(target, bcg_kind, bcg_device, 1, seed=5))
    found.fixed(engine.sweep_history_problem)
    (finding,) = found.found
    assert finding.seed == 5, finding


def test_a_target_without_a_capture_set_api_skips_its_check(bcg_kind, bcg_device):
    config = CheckConfig(load_target(vllm_minimal), bcg_kind, bcg_device, 1)
    assert config.target.capture_set is None
    assert sweep_problem((2, 1), config) is None


def test_the_engine_scenario_holds_on_a_target_whose_breaks_return_nothing(bcg_kind, bcg_device):
    # vLLM's contract: the logits processor writes into its buffer instead of returning.
    config = CheckConfig(load_target(vllm_minimal), bcg_kind, bcg_device, 1)
    assert not config.target.supports_tensor_returns
    assert engine_problem(CANONICAL, config) is None


@pytest.mark.parametrize(
    ("variant", "prop", "words"),
    [
        ("replays_last_capture", "pool", "breaks that another capture recorded"),
        ("capture_restores_default_stream", "stream-order", "left the caller's current stream"),
        ("replay_eager_on_capture_stream", "stream-order", ("stream race", "stale")),
        ("alias_cached_per_address", "engine", "with another shape than the capture handed it"),
        (
            "capture_set_slice_off_by_one",
            "engine",
            "a call of the capture set at batch 1 after batches [4] (sizes (3, 2, 1)): the breaks "
            "were given lengths [2], the batch's are",
        ),
        (
            "capture_set_output_unsliced",
            "engine",
            "a call of the capture set at batch 3 after batches [4, 4] (sizes (4, 2), inputs "
            "sliced from the caller's buffers): the logits have shape (4, 32)",
        ),
        (
            "capture_set_pool_per_size",
            "engine",
            "the capture set of sizes (3, 2, 1) returned outputs in graph pools",
        ),
        (
            "capture_set_padding_skipped",
            "engine",
            "buffers): the breaks of the captured size 4 were given rows 3 to 3 holding",
        ),
        (
            "capture_set_pads_since_its_last_call",
            "engine",
            "a call of the capture set at batch 1 after batches [1, 4] (sizes (4, 2), inputs "
            "sliced from the caller's buffers): the breaks of the captured size 2 were given rows "
            "1 to 1 holding",
        ),
        (
            "capture_set_pads_with_zero",
            "engine",
            "were given rows 3 to 3 holding [0], not the pad value -1",
        ),
        (
            "capture_set_copy_skipped_for_the_same_inputs",
            "engine",
            "a call of the capture set at batch 1 after batches [4] (sizes (3, 2, 1)): the logits "
            "differ from eager",
        ),
        (
            "runner_signature_without_batch",
            "engine",
            "the runner's call at batch 2 after batches [3] raised RuntimeError",
        ),
    ],
)
def test_each_planted_bug_of_capture_sets_and_streams_is_found_by_its_check(
    bcg_kind, tmp_path, variant, prop, words
):
    # The first finding is enough to show the check finds the bug; shrinking drawn engine
    # examples would cost the suite a minute.
    findings = failing(check(prop, variant, bcg_kind, tmp_path, first=True))
    texts = (words,) if isinstance(words, str) else words
    assert findings and any(t in f.message for f in findings for t in texts), findings


def test_a_capture_set_finding_stands_alone_naming_its_set(bcg_kind, tmp_path: Path):
    case = ("replays_last_capture", PROGRAM, {"capture_set": SET.as_data()}, "sharing a pool")
    _fails_on_the_planted_bug("pool", case, bcg_kind, tmp_path)
    (script,) = tmp_path.glob("*.py")
    assert f"SCENARIO = {{'capture_set': {SET.as_data()!r}}}" in script.read_text()


def test_the_caller_stream_is_checked_after_every_replay(bcg_kind, bcg_device):
    from verification.planted.property_targets import build

    base = build(None)

    class LeavesAStream(base.BreakableCUDAGraphCapture):
        def replay(self) -> None:
            super().replay()
            torch.cuda.set_stream(torch.cuda.Stream())

    target = load_target(type(base)(**{**vars(base), "BreakableCUDAGraphCapture": LeavesAStream}))
    config = CheckConfig(target, bcg_kind, bcg_device, 1)
    problem = capture_set_problem(PROGRAM, CaptureSet(), config)
    assert problem is not None and "replay() left the caller's current stream" in problem


def test_a_capture_set_api_finding_stands_alone(bcg_kind, tmp_path: Path):
    scenario = {"fixed": "verification.properties.engine:sweep_problem", "args": (SWEEP_SIZES,)}
    case = ("capture_set_output_unsliced", PROGRAM, scenario, "the logits have shape (4, 32)")
    _fails_on_the_planted_bug("engine", case, bcg_kind, tmp_path)
