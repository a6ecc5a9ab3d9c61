"""Tests for BreakableGraphRunner: per-signature capture, warmup, static buffers, debug checks."""

from __future__ import annotations

import pytest
import torch

from breakable_cudagraph import BreakableGraphRunner, eager_break_during_capture


@eager_break_during_capture
def eager_bias(t: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(t + 100)


class Model:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
        self.calls += 1
        out = torch.empty_like(x)
        eager_bias(x * scale, out)
        return out + 1


def test_runner_captures_once_and_replays_new_inputs(bcg_device: str) -> None:
    model = Model()
    runner = BreakableGraphRunner(model, warmup=2)
    first = runner(torch.ones(4, device=bcg_device))
    assert torch.equal(first, torch.full_like(first, 103.0))
    assert model.calls == 3  # two warmups + one capture
    for value in (2.0, -1.0):
        again = runner(torch.full((4,), value, device=bcg_device))
        assert again is first
        assert torch.equal(again, torch.full_like(again, value * 2 + 101))
    assert model.calls == 3
    assert len(runner.captures) == 1
    assert runner.captures[0].num_eager_breaks == 1


def test_runner_captures_per_shape_and_per_non_tensor_value(bcg_device: str) -> None:
    model = Model()
    runner = BreakableGraphRunner(model, warmup=0)
    a = runner(torch.ones(4, device=bcg_device))
    b = runner(torch.ones(8, device=bcg_device))
    c = runner(torch.ones(4, device=bcg_device), scale=3.0)
    assert len(runner.captures) == 3
    assert a.shape == (4,) and b.shape == (8,)
    assert torch.equal(c, torch.full_like(c, 104.0))
    assert runner(torch.ones(4, device=bcg_device)) is a
    assert all(capture.pool == runner.pool for capture in runner.captures)


def test_runner_rejects_unhashable_non_tensor_argument(bcg_device: str) -> None:
    runner = BreakableGraphRunner(lambda x, opts: x + 1)
    with pytest.raises(TypeError, match="unhashable"):
        runner(torch.ones(2, device=bcg_device), {1, 2})


def test_runner_rejects_bad_construction_arguments(bcg_device: str) -> None:
    with pytest.raises(TypeError, match="callable"):
        BreakableGraphRunner(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="warmup"):
        BreakableGraphRunner(lambda: None, warmup=-1)


def test_runner_debug_detects_moved_static_output(bcg_device: str) -> None:
    runner = BreakableGraphRunner(lambda x: x * 2, debug=True)
    out = runner(torch.ones(4, device=bcg_device))
    runner(torch.ones(4, device=bcg_device))
    out.set_(torch.zeros(4, device=bcg_device))
    with pytest.raises(RuntimeError, match="moved"):
        runner(torch.ones(4, device=bcg_device))


def test_runner_accepts_its_own_static_outputs_as_inputs(bcg_device: str) -> None:
    runner = BreakableGraphRunner(lambda x: x + 1, warmup=0)
    out = runner(torch.zeros(3, device=bcg_device))
    assert torch.equal(out, torch.ones(3, device=bcg_device))
    out2 = runner(out.clone())
    assert torch.equal(out2, torch.full((3,), 2.0, device=bcg_device))


def test_runner_warms_up_on_a_side_stream_before_capturing(bcg_device: str) -> None:
    streams: list[object] = []

    def fn(x: torch.Tensor) -> torch.Tensor:
        streams.append(torch.cuda.current_stream())
        return x * 3

    runner = BreakableGraphRunner(fn, warmup=3)
    out = runner(torch.ones(2, device=bcg_device))
    assert len(streams) == 4
    assert all(stream != torch.cuda.default_stream() for stream in streams)
    assert torch.equal(out, torch.full_like(out, 3.0))
