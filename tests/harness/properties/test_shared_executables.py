"""Shared executables under the property checks: with sharing on, the library replays a capture
set in any order and programs sharing a pool as eager, and the pool check's scenarios find a
shared executable launched without switching back to its first capture's parameters (a
capture set replayed out of order) and segments of other kernels joined to one executable
(programs sharing a pool), and a capture that still launches through a shared executable after
the capture that made it was dropped."""

from __future__ import annotations

import pytest

from breakable_cudagraph.executables import SHARE_ENV
from tests.harness.properties.test_program_reproducers import PROGRAM, TWO_SEGMENTS
from verification.planted.property_targets import _SHARING_ON, _copy, _edited, build, library_target
from verification.properties.base import CheckConfig
from verification.properties.capture_set import CaptureSet, capture_set_problem
from verification.properties.pool import _shared_pool_problem
from verification.targets import load_target

OUT_OF_ORDER = CaptureSet(sizes=(3, 1), replays=(1, 0, 1))


def test_the_library_sharing_executables_replays_a_set_and_a_shared_pool_as_eager(
    bcg_kind, bcg_device, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv(SHARE_ENV, "1")
    config = CheckConfig(load_target("breakable_cudagraph"), bcg_kind, bcg_device, 1)
    assert capture_set_problem(PROGRAM, OUT_OF_ORDER, config) is None
    assert _shared_pool_problem([PROGRAM, TWO_SEGMENTS], config, []) is None


def test_a_shared_executable_never_switched_back_is_found_by_a_set_replayed_out_of_order(
    bcg_kind, bcg_device
):
    target = load_target(build("shared_executable_owner_never_switched_back"))
    problem = capture_set_problem(
        PROGRAM, OUT_OF_ORDER, CheckConfig(target, bcg_kind, bcg_device, 1)
    )
    assert problem is not None and "the capture of size 3" in problem, problem


def test_segments_of_other_kernels_joined_to_one_executable_are_found_by_a_shared_pool(
    bcg_kind, bcg_device
):
    target = load_target(build("shared_executable_across_kernels"))
    config = CheckConfig(target, bcg_kind, bcg_device, 1)
    problem = _shared_pool_problem([PROGRAM, TWO_SEGMENTS], config, [])
    assert problem is not None and "replay than eager" in problem, problem


def test_a_capture_left_after_another_of_its_pool_was_dropped_must_still_replay(
    bcg_kind, bcg_device, monkeypatch: pytest.MonkeyPatch
):
    # The executable's first capture dropped while another still launches through it: a
    # release that resets the first graph regardless leaves the other replaying nothing.
    lib = _copy("shared_executable_reset_with_its_first_capture")
    _edited(
        "executables",
        *_SHARING_ON,
        "        if graph is not self.owner:\n            with GRAPH_LOCK:\n                graph.reset()",
        "        with GRAPH_LOCK:\n            graph.reset()",
    )(lib)
    target = load_target(library_target(lib, "sharing", "property_targets", None))
    dropped = CaptureSet(sizes=(3, 1), replays=(1,), remake=(0,))
    # The size-1 capture, switched in last, replays after the first is dropped (the pool
    # check turns the raise into its finding).
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        capture_set_problem(PROGRAM, dropped, CheckConfig(target, bcg_kind, bcg_device, 1))
    monkeypatch.setenv(SHARE_ENV, "1")
    clean = CheckConfig(load_target("breakable_cudagraph"), bcg_kind, bcg_device, 1)
    assert capture_set_problem(PROGRAM, dropped, clean) is None
