"""Tests for the disable switch: env var read at call time and enabled= override."""

from __future__ import annotations

import gc

import pytest
import torch

from breakable_cudagraph import (
    BreakableCUDAGraphCapture,
    BreakableGraphRunner,
    eager_break_during_capture,
)

CALLS: list[str] = []


@eager_break_during_capture
def record(t: torch.Tensor) -> torch.Tensor:
    CALLS.append("record")
    return t + 1


def test_env_var_set_after_import_runs_capture_eagerly(
    bcg_device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BREAKABLE_CUDAGRAPH_DISABLE", "1")
    CALLS.clear()
    x = torch.full((4,), 2.0, device=bcg_device)
    capture = BreakableCUDAGraphCapture()
    with capture:
        assert BreakableCUDAGraphCapture.current() is capture
        y = record(x * 3)
    # Ran eagerly, so values are real right away (a captured graph would not have run yet).
    assert torch.equal(y, torch.full_like(y, 7.0))
    assert CALLS == ["record"]
    assert capture.num_graphs == 0 and capture.num_eager_breaks == 0
    with pytest.raises(RuntimeError, match="nothing to replay"):
        capture.replay()
    assert not BreakableCUDAGraphCapture.is_active()


def test_enabled_false_runs_eagerly_and_enabled_true_overrides_env(
    bcg_device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = torch.ones(4, device=bcg_device)
    with BreakableCUDAGraphCapture(enabled=False) as eager:
        y = x + 1
    assert torch.equal(y, torch.full_like(y, 2.0))
    with pytest.raises(RuntimeError, match="nothing to replay"):
        eager.replay()
    monkeypatch.setenv("BREAKABLE_CUDAGRAPH_DISABLE", "1")
    with BreakableCUDAGraphCapture(enabled=True) as captured:
        z = x * 5
    assert captured.num_graphs == 1
    x.fill_(2.0)
    captured.replay()
    assert torch.equal(z, torch.full_like(z, 10.0))


def test_env_var_unset_again_records_graphs(
    bcg_device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BREAKABLE_CUDAGRAPH_DISABLE", "1")
    with BreakableCUDAGraphCapture() as eager:
        torch.ones(2, device=bcg_device).add_(1)
    assert eager.num_graphs == 0
    monkeypatch.delenv("BREAKABLE_CUDAGRAPH_DISABLE")
    x = torch.ones(2, device=bcg_device)
    with BreakableCUDAGraphCapture() as captured:
        record(x + 1)
    assert captured.num_graphs == 1 and captured.num_eager_breaks == 1


def test_disabled_capture_still_rejects_nesting(
    bcg_device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BREAKABLE_CUDAGRAPH_DISABLE", "1")
    with BreakableCUDAGraphCapture():
        with pytest.raises(RuntimeError, match="Nested"), BreakableCUDAGraphCapture():
            pass
        torch.ones(2, device=bcg_device).add_(1)


def test_disabled_runner_calls_fn_each_time_with_same_static_objects(
    bcg_device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BREAKABLE_CUDAGRAPH_DISABLE", "1")
    calls = []

    def fn(x: torch.Tensor) -> torch.Tensor:
        calls.append(x.data_ptr())
        return record(x * 2)

    runner = BreakableGraphRunner(fn, warmup=0)
    first = runner(torch.ones(4, device=bcg_device))
    second = runner(torch.full((4,), 3.0, device=bcg_device))
    assert second is first
    assert torch.equal(second, torch.full_like(second, 7.0))
    assert len(calls) == 2 and calls[0] == calls[1]  # same static input buffer each time


def test_disabled_capture_restores_the_callers_stream(bcg_device: str) -> None:
    caller = torch.cuda.current_stream()
    assert caller == torch.cuda.default_stream()
    with BreakableCUDAGraphCapture(enabled=False):
        assert torch.cuda.current_stream() != caller  # a side stream, as a capture would use
    assert torch.cuda.current_stream() == caller


def test_decorator_takes_enable_only_by_keyword(bcg_device: str) -> None:
    with pytest.raises(TypeError):
        eager_break_during_capture(len, False)  # type: ignore[call-overload]


def test_a_disabled_capture_that_raises_leaves_the_collector_pause_balanced(
    bcg_device: str,
) -> None:
    x = torch.ones(4, device=bcg_device)
    with pytest.raises(ValueError):
        with BreakableCUDAGraphCapture(enabled=False):
            raise ValueError("abort")
    seen: list[bool] = []
    with BreakableCUDAGraphCapture():
        seen.append(gc.isenabled())
        x * 2
    assert seen == [False] and gc.isenabled()
