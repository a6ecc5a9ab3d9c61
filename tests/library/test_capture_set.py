"""CaptureSet: a function of the batch captured at every size of a sweep, largest first, into one
pool, replayed at the smallest size that fits a batch (padded), eager above the largest."""

from __future__ import annotations

import gc
from collections.abc import Iterable

import pytest
import torch

from breakable_cudagraph import BreakableCUDAGraphCapture, CaptureSet, eager_break_during_capture
from breakable_cudagraph.arguments import PoolMemory

SIZES = (1, 2, 4, 8)
HIDDEN = 8


class HostLengths:
    """Sequence lengths the host sets before each call, as an engine's attention metadata."""

    def __init__(self) -> None:
        self.lengths = [1] * 64


@eager_break_during_capture
def scale_by_length(h: torch.Tensor, host: HostLengths, out: torch.Tensor) -> None:
    """Reads host values at every replay: cannot be captured."""
    lengths = torch.tensor(host.lengths[: h.shape[0]], dtype=h.dtype).to(h.device)
    out.copy_(h * lengths.view(-1, 1))


class Step:
    """A two-input decode-like step with one eager break; records each run's batch and whether
    the collector was on."""

    def __init__(self, device: str) -> None:
        g = torch.Generator().manual_seed(0)
        self.w = torch.randn(HIDDEN, HIDDEN, generator=g).to(device)
        self.host = HostLengths()
        self.batches: list[int] = []
        self.collector_on: list[bool] = []

    def __call__(self, x: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.batches.append(x.shape[0])
        self.collector_on.append(gc.isenabled())
        h = torch.tanh(x @ self.w)
        out = torch.empty_like(h)
        scale_by_length(h, self.host, out)
        return out @ self.w + bias, out.sum(-1)


def _examples(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros(1, HIDDEN, device=device), torch.zeros(1, HIDDEN, device=device)


def _batch(device: str, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, HIDDEN, generator=g).to(device), torch.randn(n, HIDDEN, generator=g).to(
        device
    )


def _bitwise(got: tuple[torch.Tensor, ...], want: tuple[torch.Tensor, ...]) -> bool:
    return all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_every_size_replays_bitwise_as_eager_at_that_size(bcg_device: str) -> None:
    step = Step(bcg_device)
    captured = CaptureSet(step, SIZES, _examples(bcg_device))
    for seed, n in enumerate(SIZES):
        x, bias = _batch(bcg_device, n, seed)
        step.host.lengths[:n] = [seed + i + 1 for i in range(n)]
        before = len(step.batches)
        got = captured(x, bias)
        assert len(step.batches) == before, "a captured size ran fn instead of replaying"
        assert _bitwise(got, step(x, bias)), n


def test_a_batch_between_sizes_replays_the_next_size_up_with_the_rest_padded(
    bcg_device: str,
) -> None:
    step = Step(bcg_device)
    captured = CaptureSet(step, SIZES, _examples(bcg_device), pad_value=-3)
    x, bias = _batch(bcg_device, 3, 7)
    step.host.lengths[:4] = [2, 3, 4, 5]
    got = captured(x, bias)
    assert [tuple(out.shape) for out in got] == [(3, HIDDEN), (3,)]
    for buffer, given in zip(captured.inputs, (x, bias), strict=True):
        assert torch.equal(buffer[:3], given)
        assert torch.equal(buffer[3:4], torch.full_like(buffer[3:4], -3))
    padded = [torch.cat([t, torch.full_like(t[:1], -3)]) for t in (x, bias)]
    assert _bitwise(got, tuple(out[:3] for out in step(*padded)))
    assert torch.allclose(got[0], step(x, bias)[0]) and torch.allclose(got[1], step(x, bias)[1])


def test_a_batch_above_the_largest_size_runs_eagerly(bcg_device: str) -> None:
    step = Step(bcg_device)
    captured = CaptureSet(step, SIZES, _examples(bcg_device))
    x, bias = _batch(bcg_device, 9, 1)
    before = len(step.batches)
    got = captured(x, bias)
    assert step.batches[before:] == [9]
    assert _bitwise(got, step(x, bias))


def test_sizes_are_captured_largest_first_into_one_pool_on_one_stream(bcg_device: str) -> None:
    step = Step(bcg_device)
    # With warmup=0 nothing runs eagerly first: cuBLAS must have its handle before a capture
    # (CUDA refuses making one inside it), as after an engine's profiling run.
    step(*_batch(bcg_device, 1, 0))
    step.batches.clear()
    pool = torch.cuda.graph_pool_handle()
    captured = CaptureSet(step, (2, 8, 1, 4), _examples(bcg_device), pool=pool, warmup=0)
    assert step.batches == [8, 4, 2, 1]
    assert captured.sizes == (8, 4, 2, 1)
    assert captured.pool == pool
    assert [capture.pool for capture in captured.captures] == [pool] * 4
    streams = {capture.stream for capture in captured.captures}
    assert len(streams) == 1 and torch.cuda.current_stream() not in streams


@eager_break_during_capture
def add_table_rows(h: torch.Tensor, table: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(h + table[: h.shape[0]])


def test_a_sweep_looks_each_tensor_outside_the_pool_up_once_and_holds_none_after(
    bcg_device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = torch.randn(max(SIZES), HIDDEN, device=bcg_device)  # a weight: outside the pool

    def step(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        add_table_rows(torch.tanh(x), table, out)
        return out * 2

    asked: list[int] = []
    look_up = PoolMemory.addresses_in_pool

    def counted(self: PoolMemory, addresses: Iterable[int]) -> set[int]:
        listed = list(addresses)
        asked.extend(listed)
        return look_up(self, listed)

    monkeypatch.setattr(PoolMemory, "addresses_in_pool", counted)
    captured = CaptureSet(step, SIZES, (torch.zeros(1, HIDDEN, device=bcg_device),))
    assert asked.count(table.data_ptr()) == 1, "every size looked the weight up again"
    assert not any(capture._pool_memory.held for capture in captured.captures)
    for n in SIZES:
        x = torch.randn(n, HIDDEN, device=bcg_device)
        assert torch.equal(captured(x), step(x))


def test_the_collector_is_off_for_the_whole_sweep_and_back_on_after(bcg_device: str) -> None:
    step = Step(bcg_device)
    assert gc.isenabled()
    CaptureSet(step, SIZES, _examples(bcg_device), warmup=2)
    assert len(step.collector_on) == 3 * len(SIZES)
    assert not any(step.collector_on)
    assert gc.isenabled()


def test_an_input_fn_writes_is_written_back_to_the_callers_rows(bcg_device: str) -> None:
    def bump(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x * 2

    captured = CaptureSet(bump, (2, 4), (torch.zeros(1, 3, device=bcg_device),))
    x = torch.arange(9.0, device=bcg_device).view(3, 3)
    expected_x = x + 1
    got = captured(x)
    assert torch.equal(x, expected_x)
    assert torch.equal(got, expected_x * 2)


def test_graphs_disabled_capture_nothing_and_run_eagerly(bcg_device: str) -> None:
    step = Step(bcg_device)
    captured = CaptureSet(step, SIZES, _examples(bcg_device), enabled=False)
    assert captured.captures == [] and step.batches == []
    x, bias = _batch(bcg_device, 2, 3)
    assert _bitwise(captured(x, bias), step(x, bias))
    assert step.batches == [2, 2]


def _left_clean(caller: torch.cuda.Stream) -> None:
    assert BreakableCUDAGraphCapture.current() is None
    assert torch.cuda.current_stream() == caller
    assert gc.isenabled()


@pytest.mark.parametrize(
    ("sizes", "error", "words"),
    [
        ((), ValueError, "sizes is empty"),
        ((4, 0), ValueError, "at least 1, got 0"),
        ((4, -2), ValueError, "at least 1, got -2"),
        ((4, 1.5), TypeError, "must be an int, got 1.5"),
        ((True,), TypeError, "must be an int, got True"),
        ((2, 4, 2), ValueError, "batch size 2 is given more than once"),
        ("48", TypeError, "iterable of ints, got str"),
        (8, TypeError, "iterable of ints, got int"),
    ],
)
def test_bad_sizes_raise_naming_the_problem_before_anything_is_captured(
    bcg_device: str, sizes: object, error: type[Exception], words: str
) -> None:
    step = Step(bcg_device)
    caller = torch.cuda.current_stream()
    with pytest.raises(error, match=words):
        CaptureSet(step, sizes, _examples(bcg_device))  # type: ignore[arg-type]
    assert step.batches == []
    _left_clean(caller)


def test_bad_arguments_raise_naming_the_problem(bcg_device: str) -> None:
    step = Step(bcg_device)
    examples = _examples(bcg_device)
    caller = torch.cuda.current_stream()
    with pytest.raises(TypeError, match="callable"):
        CaptureSet(42, SIZES, examples)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tuple or list of tensors"):
        CaptureSet(step, SIZES, examples[0])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="example_inputs is empty"):
        CaptureSet(step, SIZES, ())
    with pytest.raises(ValueError, match="0-dimensional"):
        CaptureSet(step, SIZES, (torch.zeros((), device=bcg_device),))
    with pytest.raises(TypeError, match="pad_value"):
        CaptureSet(step, SIZES, examples, pad_value="zero")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="warmup"):
        CaptureSet(step, SIZES, examples, warmup=-1)
    assert step.batches == []
    _left_clean(caller)


def test_bad_batches_raise_naming_the_problem(bcg_device: str) -> None:
    step = Step(bcg_device)
    captured = CaptureSet(step, SIZES, _examples(bcg_device))
    x, bias = _batch(bcg_device, 3, 0)
    with pytest.raises(ValueError, match="input 1 has batch 2 where input 0 has 3"):
        captured(x, bias[:2])
    with pytest.raises(ValueError, match=r"takes torch.float32 of shape \(batch, 8\)"):
        captured(x, bias[:, :4])
    with pytest.raises(TypeError, match="takes 2 batched tensors, got 1"):
        captured(x)
    with pytest.raises(TypeError, match="input 1 is a float"):
        captured(x, 1.0)
    with pytest.raises(ValueError, match="batch is empty"):
        captured(x[:0], bias[:0])
    assert _bitwise(captured(x, bias), step(x, bias))  # nothing was left half done


def test_an_output_without_the_batch_as_dim_0_is_refused_and_nothing_left_open(
    bcg_device: str,
) -> None:
    caller = torch.cuda.current_stream()
    with pytest.raises(ValueError, match=r"output 0 of fn at batch size 4 has shape \(\)"):
        CaptureSet(lambda x: x.sum(), (2, 4), (torch.zeros(1, 3, device=bcg_device),))
    _left_clean(caller)


def test_a_failing_capture_mid_sweep_propagates_and_leaves_nothing_open(bcg_device: str) -> None:
    def fails_at_two(x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 2:
            raise RuntimeError("no batch of two")
        return x + 1

    caller = torch.cuda.current_stream()
    with pytest.raises(RuntimeError, match="no batch of two"):
        CaptureSet(fails_at_two, (1, 2, 4), (torch.zeros(1, 3, device=bcg_device),))
    _left_clean(caller)
