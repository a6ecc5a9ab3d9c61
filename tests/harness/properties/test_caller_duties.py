"""Contracts carry the caller's duties: under vLLM's and SGLang's contracts the checker freezes
the collector and captures from one thread at a time, as their runners do, and notes a target's
reliance on that instead of calling it a bug; a target that guards itself is tested without
them, so its guards stay tested. A target with no mode parameter is judged in ``global``."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import torch
from hypothesis import settings

from tests.property_checks import CI_CYCLES
from verification.findings import CALLER_DUTY
from verification.planted.property_targets import build as planted
from verification.planted.vllm_minimal import build as minimal
from verification.properties.base import CheckConfig
from verification.properties.faults import collector_problem
from verification.properties.processes import run_properties
from verification.properties.threads import _bug
from verification.targets import load_target
from verification.targets.contracts import (
    COLLECTOR,
    ONE_CAPTURING_THREAD,
    SIDE_STREAM,
    get_contract,
)


def _redeclared(target: Any, **declarations: Any) -> SimpleNamespace:
    names = vars(target) | declarations
    return SimpleNamespace(**{k: v for k, v in names.items() if not k.startswith("_planted")})


def test_vllm_and_sglang_contracts_carry_both_duties_and_the_library_guards_itself():
    for name, runner in (("out-buffer", "vLLM's runner"), ("sglang", "SGLang's runner")):
        contract = get_contract(name)
        assert set(contract.caller_duties) == {COLLECTOR, ONE_CAPTURING_THREAD, SIDE_STREAM}
        assert contract.reliance_note(COLLECTOR) == (
            f"relies on its caller to freeze the collector around captures; {runner} does"
        )
    assert load_target("breakable_cudagraph").caller_duties == ()
    guarded = _redeclared(planted(None), BREAK_CONTRACT="sglang", GUARDS_ITSELF=True)
    assert load_target(guarded).caller_duties == ()


def test_collector_reliance_under_an_engine_contract_is_a_note_not_a_bug(bcg_kind, bcg_device):
    # The library with its collector pause removed, judged as SGLang is: the checker freezes
    # the collector as SGLang's runner does, and says the target relies on that.
    target = load_target(_redeclared(planted("collector_not_paused"), BREAK_CONTRACT="sglang"))
    notes: list[str] = []
    config = CheckConfig(target, bcg_kind, bcg_device, examples=1)
    assert collector_problem(config, notes) is None
    assert notes == [
        "relies on its caller to freeze the collector around captures; SGLang's runner does"
    ]


def test_collector_bug_of_a_target_that_guards_itself_is_still_found(bcg_kind, bcg_device):
    declared = _redeclared(
        planted("collector_not_paused"), BREAK_CONTRACT="sglang", GUARDS_ITSELF=True
    )
    config = CheckConfig(load_target(declared), bcg_kind, bcg_device, examples=1)
    problem = collector_problem(config, [])
    assert problem is not None and "freed by the cyclic collector" in problem


def _one_region_at_a_time(**declarations: Any) -> SimpleNamespace:
    """The minimal vLLM target, refusing a capture while another thread has one open. It takes
    a mode: in ``global`` mode CUDA itself refuses overlapping captures' allocations."""
    base = minimal()
    lock, open_ = threading.Lock(), [0]

    class Capture(base.BreakableCUDAGraphCapture):
        def __init__(self, pool: Any = None, capture_error_mode: str = "global") -> None:
            super().__init__(pool)
            self.mode = capture_error_mode

        def _open_segment(self) -> None:
            self._graph = torch.cuda.CUDAGraph()
            self._graph.capture_begin(pool=self.pool, capture_error_mode=self.mode)

        def __enter__(self) -> Any:
            with lock:
                if open_[0]:
                    raise RuntimeError("another thread is inside a breakable region")
                open_[0] += 1
            try:
                return super().__enter__()
            except BaseException:
                with lock:
                    open_[0] -= 1
                raise

        def __exit__(self, *exc: Any) -> Any:
            try:
                return super().__exit__(*exc)
            finally:
                with lock:
                    open_[0] -= 1

    return _redeclared(base, BreakableCUDAGraphCapture=Capture, **declarations)


def _threads(target: Any, kind: str) -> list[Any]:
    results = run_properties(
        "threads", load_target(target), kind, settings.default.max_examples, cycles=CI_CYCLES
    )
    return results[0].findings


def test_overlapping_captures_under_vllm_contract_are_a_note_not_a_bug(bcg_kind):
    findings = _threads(_one_region_at_a_time(), bcg_kind)
    assert not [f for f in findings if f.fails], findings[0].message
    assert [f.kind for f in findings] == [CALLER_DUTY], findings
    assert "capture from one thread at a time; vLLM's runner does" in findings[0].message


def test_overlapping_captures_of_a_target_that_guards_itself_are_a_bug(bcg_kind):
    findings = _threads(_one_region_at_a_time(GUARDS_ITSELF=True), bcg_kind)
    bugs = [f for f in findings if f.fails]
    assert bugs and "another thread is inside a breakable region" in bugs[0].message, findings


def test_a_target_without_a_mode_parameter_is_judged_in_global_mode():
    refused = [("thread 1", RuntimeError("operation not permitted when stream is capturing"))]
    assert _bug(refused, None) is None
    assert _bug(refused, "global") is None
    assert _bug(refused, "thread_local") is not None


def test_minimal_vllm_target_captures_in_global_mode_and_passes_threads(bcg_kind):
    # vLLM 0.33.0 passes no capture_error_mode: torch's default, global.
    assert not [f for f in _threads(minimal(), bcg_kind) if f.fails]
