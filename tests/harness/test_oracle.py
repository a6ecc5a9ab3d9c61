"""Oracle semantics: exact and tolerant comparison, and every finding kind can be produced."""

from __future__ import annotations

import gc
import signal
from types import SimpleNamespace

import pytest
import torch

from tests.child_env import child_env
from tests.oracle_programs import OPS, TWO_BREAKS
from verification.execute import collector_paused
from verification.fuzz import CampaignConfig, run_isolated
from verification.oracle import SharedPool, Tolerance, check_program, compare
from verification.planted import property_targets
from verification.planted.targets import build
from verification.properties.processes import run_properties
from verification.targets import load_target


def test_compare_is_bitwise_and_treats_nan_at_same_positions_as_equal():
    x = torch.tensor([1.0, float("nan"), 3.0])
    assert compare(x, x.clone()) is None
    assert compare(x, torch.tensor([1.0, 2.0, 3.0])) is not None
    assert compare(x, x + 1e-7) is not None


def test_compare_checks_dtype_and_shape():
    x = torch.zeros(2, 3)
    assert "dtype" in compare(x, x.double())
    assert "shape" in compare(x, x.reshape(3, 2))


def test_compare_accepts_differences_within_tolerance_only():
    x = torch.tensor([1.0, 100.0])
    assert compare(x, x * (1 + 1e-4), Tolerance(rtol=1e-3)) is None
    assert compare(x, x * 1.1, Tolerance(rtol=1e-3)) is not None


def test_compare_handles_integers_and_complex():
    assert compare(torch.arange(4), torch.arange(4)) is None
    z = torch.tensor([1 + 2j, float("nan") + 0j])
    assert compare(z, z.clone()) is None


@pytest.mark.parametrize(
    ("bug", "kind"),
    [
        (None, None),
        ("output_not_copied_back", "mismatch"),
        ("eager_run_twice", "break-count"),
        ("eager_reordered", "break-order"),
        ("args_frozen", "break-args"),
    ],
)
def test_planted_bug_yields_its_finding_kind(bcg_device, bug, kind):
    finding = check_program(TWO_BREAKS, load_target(build(bug)), bcg_device, seed=5, ops=OPS)
    assert (finding and finding.violation) == kind, finding and finding.summary()


def test_a_capture_set_is_judged_only_after_the_program_alone_passes(bcg_device):
    # Each replay runs the newest capture's eager steps: only older captures of a set go wrong.
    target = load_target(property_targets.build("replays_last_capture"))
    assert check_program(TWO_BREAKS, target, bcg_device, seed=5, ops=OPS) is None
    shared = SharedPool(2, (1, 0))
    finding = check_program(TWO_BREAKS, target, bcg_device, seed=5, ops=OPS, shared=shared)
    assert finding is not None and dict(finding.scenario) == {"captures": 2, "order": (1, 0)}
    assert finding.message.startswith("with 2 captures") and "(capture 0)" in finding.message
    assert finding.replay_index == 4  # after the program's own 3 replays and capture 1's
    clean = load_target(property_targets.build(None))
    everything = SharedPool(3, (2, 0, 1, 0))
    assert check_program(TWO_BREAKS, clean, bcg_device, ops=OPS, shared=everything) is None
    # A bug the program alone shows is the program's finding, with no set attached.
    plain = check_program(
        TWO_BREAKS, load_target(build("eager_run_twice")), bcg_device, ops=OPS, shared=shared
    )
    assert plain is not None and plain.scenario == () and "captures" not in plain.message


def test_target_raising_at_replay_is_an_exception_finding(bcg_device):
    clean = build(None)

    class Raising(clean.BreakableCUDAGraphCapture):
        def replay(self) -> None:
            raise RuntimeError("boom")

    target = SimpleNamespace(**{**vars(clean), "BreakableCUDAGraphCapture": Raising})
    finding = check_program(TWO_BREAKS, load_target(target), bcg_device, ops=OPS)
    assert finding is not None and finding.violation == "exception" and "boom" in finding.message


def test_child_killed_by_a_signal_is_a_crash_finding(tmp_path, bcg_kind, monkeypatch):
    module = tmp_path / "aborting_target.py"
    module.write_text(
        "import os, signal\nfrom verification.planted.targets import build\n"
        "globals().update({k: v for k, v in vars(build(None)).items() if k != '__name__'})\n"
        "class BreakableCUDAGraphCapture(BreakableCUDAGraphCapture):\n"
        "    def replay(self):\n        os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    monkeypatch.setenv("PYTHONPATH", child_env(tmp_path)["PYTHONPATH"])
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["fuzz", "--target", "aborting_target", "--device", bcg_kind, "--examples", "2"]
    config = CampaignConfig(target=load_target("aborting_target"), kind=bcg_kind)
    status, result = run_isolated(argv, config)
    assert status == 1 and result is not None
    assert result.findings[0].violation == "crash"
    assert signal.SIGKILL.name in result.findings[0].message
    assert "def program(" in result.reproducers[0]


def _collector_state_recording_target() -> tuple[SimpleNamespace, list[bool]]:
    """The clean planted target, recording whether the collector is on at each capture."""
    clean = build(None)
    seen: list[bool] = []

    class Recording(clean.BreakableCUDAGraphCapture):
        def __enter__(self):
            seen.append(gc.isenabled())
            return super().__enter__()

    return SimpleNamespace(**{**vars(clean), "BreakableCUDAGraphCapture": Recording}), seen


@pytest.mark.parametrize("prop", [None, "pool", "nested", "stream-order", "faults"])
def test_harness_captures_with_the_collector_paused(bcg_device, bcg_kind, prop, monkeypatch):
    # Freeing an old graph inside an open capture breaks it on a GPU
    # (tests/sim/test_graph_semantics.py), and the collector frees graphs held in cycles
    # whenever it runs.
    # faults' collector scenario captures without the pause on purpose: it checks the target's.
    from verification.properties import faults

    monkeypatch.setattr(faults, "collector_problem", lambda config: None)
    target, seen = _collector_state_recording_target()
    if prop is None:
        assert check_program(TWO_BREAKS, load_target(target), bcg_device, ops=OPS) is None
    else:
        run_properties(prop, load_target(target), bcg_kind, examples=2)
    assert seen and not any(seen), seen
    assert gc.isenabled()


def test_collector_pauses_nest_and_the_last_one_out_restores_it():
    assert gc.isenabled()
    with collector_paused():
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_mismatch_names_where_the_replay_parts_from_eager(bcg_device):
    # The planted target never copies a break's result back at replay: the graph segment after
    # the break reads stale values, and the finding says which place parted first.
    finding = check_program(
        TWO_BREAKS, load_target(build("output_not_copied_back")), bcg_device, seed=5, ops=OPS
    )
    assert finding is not None and finding.violation == "mismatch"
    assert finding.cause.kind == "values" and finding.cause.involves, finding.message
    assert "break `" in finding.message or "graph segment" in finding.message, finding.message
    assert "differ" in finding.message
