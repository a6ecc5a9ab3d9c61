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


# ---- input writes keep eager semantics ------------------------------------------------------


@pytest.mark.parametrize("enabled", [None, False], ids=["graphs", "graphs disabled"])
def test_issue_25_example_gives_eager_results_and_eager_inputs_on_every_call(
    bcg_device: str, enabled: bool | None
) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)  # writes its own input, as in-place position or cache-index updates do
        return x * 2

    runner = BreakableGraphRunner(fn, enabled=enabled)
    side = torch.cuda.Stream()
    for call in range(3):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            x = torch.full((4,), 10.0, device=bcg_device)
            eager_x = x.clone()
            eager_result = fn(eager_x)
            result = runner(x)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        assert torch.equal(eager_result, torch.full((4,), 22.0, device=bcg_device))
        assert torch.equal(result, eager_result), f"call {call}: {result.tolist()}"
        assert torch.equal(x, eager_x), f"call {call}: the caller's x is {x.tolist()}"


def test_runner_writes_back_only_the_inputs_fn_wrote(bcg_device: str) -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        torch.mul(y, 3, out=x)
        return y + 1

    runner = BreakableGraphRunner(fn)
    for value in (1.0, 2.0):
        x, y = torch.zeros(4, device=bcg_device), torch.full((4,), value, device=bcg_device)
        version = y._version
        out = runner(x, y)
        assert torch.equal(x, torch.full_like(x, 3 * value))
        assert torch.equal(out, torch.full_like(out, value + 1))
        assert y._version == version, "an input fn only read was written"


def test_runner_returns_outputs_that_are_inputs_as_the_callers_tensors(bcg_device: str) -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x.mul_(2)
        return x, x.t(), x[1:, ::2], x * 1

    runner = BreakableGraphRunner(fn)
    owned = None
    for value in (1.0, 5.0):
        # The caller's x every other column of a wider tensor, one row in: strides and offset.
        wide = torch.zeros(4, 6, device=bcg_device)
        x = wide[1:, ::2]
        x.fill_(value)
        same, transposed, sliced, fresh = runner(x)
        assert same is x
        assert torch.equal(x, torch.full_like(x, 2 * value))
        for view, expected in ((transposed, x.t()), (sliced, x[1:, ::2])):
            assert view.untyped_storage().data_ptr() == wide.untyped_storage().data_ptr()
            assert view.stride() == expected.stride()
            assert view.storage_offset() == expected.storage_offset()
        x.fill_(-7.0)  # the views see the caller's later writes, as eager's do
        assert torch.equal(transposed, x.t()) and torch.equal(sliced, x[1:, ::2])
        assert owned is None or fresh is owned  # the runner's own output, kept per signature
        owned = fresh


@eager_break_during_capture
def zero_if_positive(x: torch.Tensor) -> None:
    if x.sum().item() > 0:  # data-dependent: runs eagerly at every replay
        x.zero_()


def test_runner_writes_back_what_an_eager_break_writes_at_replay_only(bcg_device: str) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        zero_if_positive(x)
        return x + 1

    runner = BreakableGraphRunner(fn)
    x = -torch.ones(3, device=bcg_device)
    assert torch.equal(runner(x), torch.zeros(3, device=bcg_device))  # no write at capture
    assert torch.equal(x, -torch.ones(3, device=bcg_device))
    x = torch.ones(3, device=bcg_device)
    assert torch.equal(runner(x), torch.ones(3, device=bcg_device))
    assert torch.equal(x, torch.zeros(3, device=bcg_device)), "the break's write was lost"


def test_runner_finds_writes_under_inference_mode(bcg_device: str) -> None:
    runner = BreakableGraphRunner(lambda x: x.add_(1))
    with torch.inference_mode():
        for _ in range(2):
            x = torch.zeros(2, device=bcg_device)
            assert runner(x) is x
            assert torch.equal(x, torch.ones(2, device=bcg_device))


def test_runner_with_graphs_disabled_refreshes_an_expanded_output(bcg_device: str) -> None:
    # Found by the runner property (seed 3): torch refuses to copy into an expand whole.
    runner = BreakableGraphRunner(lambda x: torch.exp(x).expand(2), enabled=False)
    first = runner(torch.zeros((), device=bcg_device))
    again = runner(torch.ones((), device=bcg_device))
    assert again is first
    assert torch.equal(again, torch.exp(torch.ones(2, device=bcg_device)))


def test_runner_captures_again_when_only_a_keyword_value_changes(bcg_device: str) -> None:
    def scaled(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return x * scale

    runner = BreakableGraphRunner(scaled)
    x = torch.ones(3, device=bcg_device)
    assert torch.equal(runner(x, scale=3.0), torch.full_like(x, 3.0))
    assert torch.equal(runner(x, scale=5.0), torch.full_like(x, 5.0))
    assert len(runner.captures) == 2


def test_runner_defaults_warm_up_once_and_do_not_check_addresses(bcg_device: str) -> None:
    calls: list[int] = []

    def fn(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return x + 1

    runner = BreakableGraphRunner(fn)
    out = runner(torch.ones(2, device=bcg_device))
    assert len(calls) == 2  # one warm-up, one capture
    out.set_(torch.zeros(2, device=bcg_device))  # debug=True would raise on this move
    runner(torch.ones(2, device=bcg_device))


@pytest.mark.parametrize("warmup", [True, -1, 1.5])
def test_runner_rejects_a_warmup_that_is_not_a_count(bcg_device: str, warmup: object) -> None:
    with pytest.raises(ValueError, match="warmup must be an int"):
        BreakableGraphRunner(lambda x: x, warmup=warmup)  # type: ignore[arg-type]


def test_runner_takes_fn_by_position_or_keyword_and_its_options_only_by_keyword(
    bcg_device: str,
) -> None:
    assert BreakableGraphRunner(fn=torch.neg).fn is torch.neg
    with pytest.raises(TypeError):
        BreakableGraphRunner(torch.neg, 2)  # type: ignore[misc]
