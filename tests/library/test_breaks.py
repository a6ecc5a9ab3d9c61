"""Tests for eager_break_during_capture: plain calls, breaks, methods, nesting, return values."""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import pytest
import torch

from breakable_cudagraph import BreakableCUDAGraphCapture, eager_break_during_capture
from breakable_cudagraph.segments import EagerStep


@eager_break_during_capture
def scale_into(out: torch.Tensor, src: torch.Tensor, *, factor: float = 1.0) -> None:
    """Writes factor * src into out."""
    out.copy_(src * factor)


@eager_break_during_capture
def plus_one(t: torch.Tensor) -> torch.Tensor:
    return t + 1


def test_decorated_call_outside_capture_is_a_plain_call(bcg_device: str) -> None:
    out = torch.zeros(3, device=bcg_device)
    scale_into(out, torch.ones(3, device=bcg_device), factor=2.0)
    assert torch.equal(out, torch.full_like(out, 2.0))
    assert scale_into.__name__ == "scale_into"
    assert scale_into.__doc__ == "Writes factor * src into out."


def test_decorator_with_arguments_and_disabled_returns_function_unchanged(bcg_device: str) -> None:
    def fn() -> int:
        return 1

    assert eager_break_during_capture(enable=False)(fn) is fn
    assert eager_break_during_capture(fn, enable=False) is fn
    wrapped = eager_break_during_capture()(fn)
    assert wrapped is not fn
    assert wrapped() == 1


def test_decorator_rejects_non_callable(bcg_device: str) -> None:
    with pytest.raises(TypeError, match="callable"):
        eager_break_during_capture(3)  # type: ignore[call-overload]


def test_decorated_call_in_capture_becomes_a_break_with_kwargs(bcg_device: str) -> None:
    x = torch.zeros(4, device=bcg_device)
    out = torch.zeros(4, device=bcg_device)
    capture = BreakableCUDAGraphCapture()
    with capture:
        y = x + 1
        scale_into(out, y, factor=3.0)
        z = out * 2
    assert capture.num_eager_breaks == 1
    assert capture.num_graphs == 2
    for value in (1.0, 5.0):
        x.fill_(value)
        capture.replay()
        assert torch.equal(z, torch.full_like(z, (value + 1) * 6))


class Scaler:
    def __init__(self, factor: float) -> None:
        self.factor = factor
        self.calls = 0

    @eager_break_during_capture
    def apply(self, out: torch.Tensor, src: torch.Tensor, *, shift: float = 0.0) -> None:
        self.calls += 1
        out.copy_(src * self.factor + shift)


def test_decorated_bound_method_breaks_and_sees_instance_state_at_replay(bcg_device: str) -> None:
    scaler = Scaler(2.0)
    x = torch.zeros(4, device=bcg_device)
    out = torch.zeros(4, device=bcg_device)
    capture = BreakableCUDAGraphCapture()
    with capture:
        scaler.apply(out, x + 1, shift=0.5)
        z = out + 0
    scaler.factor = 10.0  # read through the instance at replay, like a module's parameters
    x.fill_(1.0)
    capture.replay()
    assert scaler.calls == 2
    assert torch.equal(z, torch.full_like(z, 20.5))


@dataclasses.dataclass
class Metadata:
    positions: torch.Tensor
    extras: dict


class Pair(NamedTuple):
    left: torch.Tensor
    right: torch.Tensor


@eager_break_during_capture
def combine(meta: Metadata, pair: Pair, items: list, out: torch.Tensor) -> None:
    total = meta.positions + meta.extras["bias"] + pair.left * pair.right + items[0][1]
    out.copy_(total)


def test_nested_dataclass_dict_namedtuple_arguments_reach_the_step_at_replay(
    bcg_device: str,
) -> None:
    x = torch.zeros(4, device=bcg_device)
    bias = torch.full((4,), 100.0, device=bcg_device)
    out = torch.zeros(4, device=bcg_device)
    capture = BreakableCUDAGraphCapture()
    with capture:
        positions = x + 1  # created in the capture: held by a non-owning alias
        meta = Metadata(positions=positions, extras={"bias": bias})
        pair = Pair(x * 2, x * 3)
        combine(meta, pair, [("k", x + 10)], out)
        z = out * 1
    x.fill_(2.0)
    capture.replay()
    # (2+1) + 100 + (4*6) + (2+10)
    assert torch.equal(z, torch.full_like(z, 139.0))


@eager_break_during_capture
def inner_indexer(t: torch.Tensor, calls: list[str]) -> torch.Tensor:
    calls.append("indexer")
    return t * 2


@eager_break_during_capture
def outer_attention(t: torch.Tensor, out: torch.Tensor, calls: list[str]) -> None:
    calls.append("attention")
    out.copy_(inner_indexer(t, calls) + 1)


def test_decorated_call_inside_eager_step_runs_inline(bcg_device: str) -> None:
    x = torch.zeros(4, device=bcg_device)
    out = torch.zeros(4, device=bcg_device)
    calls: list[str] = []
    capture = BreakableCUDAGraphCapture()
    with capture:
        outer_attention(x + 1, out, calls)
        z = out + 0
    assert capture.num_eager_breaks == 1
    assert calls == ["attention", "indexer"]
    x.fill_(3.0)
    capture.replay()
    assert calls == ["attention", "indexer"] * 2
    assert torch.equal(z, torch.full_like(z, 9.0))


def test_returned_tensor_is_copied_back_at_replay(bcg_device: str) -> None:
    x = torch.zeros(4, device=bcg_device)
    capture = BreakableCUDAGraphCapture()
    with capture:
        y = plus_one(x * 2)
        z = y * 10
    for value in (1.0, 3.0):
        x.fill_(value)
        capture.replay()
        assert torch.equal(z, torch.full_like(z, (2 * value + 1) * 10))


def test_nested_returned_tensors_are_copied_back(bcg_device: str) -> None:
    x = torch.zeros(4, device=bcg_device)

    @eager_break_during_capture
    def split(t: torch.Tensor) -> dict:
        return {"a": t + 1, "b": (t - 1, "tag")}

    capture = BreakableCUDAGraphCapture()
    with capture:
        result = split(x * 1)
        z = result["a"] * result["b"][0]
    assert result["b"][1] == "tag"
    x.fill_(3.0)
    capture.replay()
    assert torch.equal(z, torch.full_like(z, 8.0))


def test_in_place_returned_argument_is_supported(bcg_device: str) -> None:
    x = torch.zeros(4, device=bcg_device)

    @eager_break_during_capture
    def bump(t: torch.Tensor) -> torch.Tensor:
        return t.add_(1)

    capture = BreakableCUDAGraphCapture()
    with capture:
        y = bump(x * 2)
        z = y * 3
    x.fill_(2.0)
    capture.replay()
    assert torch.equal(z, torch.full_like(z, 15.0))


def test_strict_capture_rejects_returned_tensor(bcg_device: str) -> None:
    x = torch.zeros(4, device=bcg_device)
    capture = BreakableCUDAGraphCapture(strict=True)
    with pytest.raises(TypeError, match="strict"), capture:
        plus_one(x * 2)
    assert not BreakableCUDAGraphCapture.is_active()


def test_strict_capture_accepts_breaks_returning_none(bcg_device: str) -> None:
    x = torch.zeros(4, device=bcg_device)
    out = torch.zeros(4, device=bcg_device)
    capture = BreakableCUDAGraphCapture(strict=True)
    with capture:
        scale_into(out, x + 1, factor=2.0)
    x.fill_(1.0)
    capture.replay()
    assert torch.equal(out, torch.full_like(out, 4.0))


def test_shape_change_of_returned_tensor_at_replay_raises(bcg_device: str) -> None:
    x = torch.zeros(4, device=bcg_device)
    sizes = [4]

    @eager_break_during_capture
    def shaped(t: torch.Tensor) -> torch.Tensor:
        return torch.zeros(sizes[0], device=t.device)

    capture = BreakableCUDAGraphCapture()
    with capture:
        shaped(x + 1)
    sizes[0] = 5
    with pytest.raises(RuntimeError, match="same shape and dtype"):
        capture.replay()


@eager_break_during_capture
def copy_into(out: torch.Tensor, src: torch.Tensor) -> None:
    out.copy_(src)


def test_break_without_tensor_arguments_is_recorded_and_replayed(bcg_device: str) -> None:
    calls: list[int] = []

    @eager_break_during_capture
    def note(log: list[int], value: int) -> None:
        log.append(value)

    with BreakableCUDAGraphCapture() as capture:
        note(calls, 7)
    capture.replay()
    assert calls == [7, 7]


def test_eager_steps_are_named_by_qualname_else_by_repr(bcg_device: str) -> None:
    x = torch.ones(2, device=bcg_device)
    out = torch.empty_like(x)
    unnamed = functools.partial(copy_into, out)  # a partial has no __qualname__
    with BreakableCUDAGraphCapture() as capture:
        copy_into(out, x)
        capture.add_eager(lambda: None)
        capture.add_eager_call(unnamed, (x,), {})
    names = [step.name for step in capture.segments if isinstance(step, EagerStep)]
    assert names == [
        "copy_into",
        "test_eager_steps_are_named_by_qualname_else_by_repr.<locals>.<lambda>",
        repr(unnamed),
    ]


@pytest.mark.parametrize("at_capture", ["tensor", "none"])
def test_break_returning_tensors_at_one_time_only_raises_at_replay(
    bcg_device: str, at_capture: str
) -> None:
    # A break that returned a tensor at capture must return one at replay, and one that
    # returned None must keep doing so: later graphs read the capture-time result.
    x = torch.ones(2, device=bcg_device)
    first = [True]

    @eager_break_during_capture
    def sometimes_a_tensor(t: torch.Tensor) -> torch.Tensor | None:
        returns_tensor = first[0] == (at_capture == "tensor")
        first[0] = False
        return t * 2 if returns_tensor else None

    with BreakableCUDAGraphCapture() as capture:
        sometimes_a_tensor(x)
    with pytest.raises(RuntimeError, match=r"returned \d tensors at replay but \d at capture"):
        capture.replay()


def test_break_returning_its_result_in_another_layout_at_replay_is_copied_not_kept(
    bcg_device: str,
) -> None:
    # The same memory in another layout is not the capture-time result: the library copies
    # it back. On a GPU torch refuses that copy (the two overlap); the simulator makes it.
    square = torch.arange(4.0, device=bcg_device).reshape(2, 2)
    calls = [0]

    @eager_break_during_capture
    def square_or_transposed() -> torch.Tensor:
        calls[0] += 1
        return square if calls[0] == 1 else square.t()

    with BreakableCUDAGraphCapture() as capture:
        square_or_transposed()
    try:
        capture.replay()
    except RuntimeError as error:
        assert "single memory location" in str(error)
    else:  # the simulator's overlapping copy gives order-dependent values, but not these
        assert not torch.equal(square, torch.arange(4.0, device=bcg_device).reshape(2, 2))


@pytest.mark.parametrize("at_capture", ["tensor", "none"])
def test_replaying_segment_by_segment_checks_what_each_break_returns(
    bcg_device: str, at_capture: str
) -> None:
    # capture.segments are public and each replays on its own, as the chain does.
    x = torch.ones(4, device=bcg_device)
    returns = {"value": at_capture}

    @eager_break_during_capture
    def sometimes(t: torch.Tensor) -> torch.Tensor | None:
        return t * 3 if returns["value"] == "tensor" else None

    with BreakableCUDAGraphCapture() as capture:
        y = x + 1
        got = sometimes(y)
        z = (got if got is not None else y) * 2
    x.fill_(2.0)
    for segment in capture.segments:
        segment.replay()
    if at_capture == "tensor":
        assert torch.equal(z, torch.full_like(x, 18.0))
    returns["value"] = "none" if at_capture == "tensor" else "tensor"
    steps = capture.segments
    with pytest.raises(RuntimeError, match="returned"):
        for segment in steps:
            segment.replay()


@pytest.mark.parametrize("aliased_at_capture", [True, False])
@pytest.mark.parametrize("view", [False, True])
def test_break_returning_its_argument_on_some_calls_only_is_refused_by_name(
    bcg_device: str, aliased_at_capture: bool, view: bool
) -> None:
    # A logits processor returns its input when it has nothing to do and a new tensor
    # otherwise. The graphs read the result and the argument through one memory, so no copy
    # can replay that as eager: replay must refuse it, naming the break.
    bias = [0.0 if aliased_at_capture else 1.0]

    @eager_break_during_capture
    def logit_bias(logits: torch.Tensor) -> torch.Tensor:
        if bias[0] == 0.0:
            return logits.view(logits.shape) if view else logits
        return logits + bias[0]

    x = torch.ones(4, device=bcg_device)
    with BreakableCUDAGraphCapture() as capture:
        logits = x * 2
        biased = logit_bias(logits)
        (logits + biased).sum()
    capture.replay()  # unchanged: the same kind of result as at capture
    bias[0] = 1.0 if aliased_at_capture else 0.0
    with pytest.raises(RuntimeError, match=r"eager step .*logit_bias returned"):
        capture.replay()


@pytest.mark.parametrize("always", ["argument", "new"])
def test_break_returning_its_argument_every_time_or_a_new_tensor_every_time_replays(
    bcg_device: str, always: str
) -> None:
    bias = [1.0]

    @eager_break_during_capture
    def processed(logits: torch.Tensor) -> torch.Tensor:
        return logits.add_(bias[0]) if always == "argument" else logits + bias[0]

    x = torch.ones(4, device=bcg_device)
    with BreakableCUDAGraphCapture() as capture:
        logits = x * 2
        total = processed(logits) + logits
    bias[0] = 3.0
    capture.replay()
    expected = 10.0 if always == "argument" else 7.0  # (2 + 3) * 2, or (2 + 3) + 2
    assert torch.equal(total, torch.full_like(total, expected))
