"""The pool check asks where a capture given ``pool=p`` puts its memory, of the allocator,
rather than hoping a corruption shows it: a capture that takes a private pool instead is found
where the out-of-order demonstration shows nothing (and says so as a note, never a harness
error), and correct targets keep their memory in the pool they are given."""

from __future__ import annotations

import re

from tests.property_checks import check, failing
from verification.planted import vllm_minimal
from verification.planted.property_targets import build
from verification.properties.base import CheckConfig
from verification.properties.pool import (
    out_of_order_demonstration,
    pool_placement_problem,
    returned_memory_problem,
)
from verification.targets import load_target

# The direct question's words: what was given, where the memory lies, why it matters.
PLACEMENT = re.compile(
    r"a capture given pool=\(\d+, \d+\) put its memory in graph pool \(\d+, \d+\) instead "
    r"\(the tensor its region made before its break in \(\d+, \d+\); the one after it in "
    r"\(\d+, \d+\)\): captures given one pool to share .* graph memory grows with every capture"
)


def test_a_capture_ignoring_its_pool_is_found_by_asking_where_its_memory_lies(bcg_kind, tmp_path):
    bugs = failing(check("pool", "pool_not_honoured", bcg_kind, tmp_path, first=True))
    assert bugs and PLACEMENT.search(bugs[0].message), bugs


def test_where_that_capture_escapes_the_demonstration_it_says_undecided_not_harness_error(
    bcg_kind, bcg_device
):
    # The two captures of the demonstration lie in private pools of their own, so the second's
    # output never takes the first's freed temporary: the demonstration cannot corrupt, and
    # before the direct question this target got only a harness error from the pool check.
    config = CheckConfig(load_target(build("pool_not_honoured")), bcg_kind, bcg_device, 1)
    demonstration = out_of_order_demonstration(config)
    assert demonstration.kind == "undecided" and not demonstration.fails, demonstration
    assert "apart from the first capture's freed temporary" in demonstration.message
    undecided: list[str] = []
    problem = pool_placement_problem(config, undecided)
    assert problem is not None and PLACEMENT.search(problem), problem
    given = re.search(r"pool=(\(\d+, \d+\))", problem).group(1)
    assert f"in graph pool {given}" not in problem and not undecided


def test_a_private_pool_per_segment_names_both_pools_it_used(bcg_kind, bcg_device):
    config = CheckConfig(load_target(build("private_pool_per_segment")), bcg_kind, bcg_device, 1)
    problem = pool_placement_problem(config)
    assert problem is not None and re.search(
        r"in graph pools \(\d+, \d+\) and \(\d+, \d+\) instead", problem
    ), problem


def test_the_library_and_vllms_minimal_capture_keep_their_memory_in_the_pool_given(
    bcg_kind, bcg_device
):
    for target in ("breakable_cudagraph", vllm_minimal.build()):
        config = CheckConfig(load_target(target), bcg_kind, bcg_device, 1)
        undecided: list[str] = []
        assert pool_placement_problem(config, undecided) is None and not undecided, target


def test_vllms_minimal_capture_gets_no_target_bug_from_the_pool_check(bcg_kind, tmp_path):
    findings = check("pool", None, bcg_kind, tmp_path, planted="vllm_minimal")
    assert not failing(findings), failing(findings)[0].message
    assert not [f for f in findings if f.kind in ("harness-error", "undecided")], findings


def test_a_capture_that_only_the_cyclic_collector_frees_is_found(bcg_kind, tmp_path):
    findings = failing(check("pool", "capture_holds_itself", bcg_kind, tmp_path))
    assert any("cycle of their own" in f.message for f in findings), findings


def test_a_returned_tensor_handed_back_as_a_non_owning_alias_is_found(bcg_kind, bcg_device):
    target = load_target(vllm_minimal.build("result_held_weakly"))
    problem = returned_memory_problem(CheckConfig(target, bcg_kind, bcg_device, 1))
    assert problem is not None and "does not own the result's memory" in problem


def test_a_returned_tensor_of_a_correct_target_stays_its_callers(bcg_kind, bcg_device):
    for target in ("breakable_cudagraph", vllm_minimal.build(None)):
        config = CheckConfig(load_target(target), bcg_kind, bcg_device, 1)
        assert returned_memory_problem(config) is None
