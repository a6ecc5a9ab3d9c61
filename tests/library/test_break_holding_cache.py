"""Tests for the capture's record of break arguments it already holds strongly.

A tensor from outside the pool given to many breaks is looked up once; the record must not
change what is held (a tensor whose storage moved into the pool is aliased again), nor outlive
the capture's hold on it (``reset()`` releases it). The pool lookup behind it asks the
allocator's snapshot for the capture's pool alone where torch allows.
"""

from __future__ import annotations

import gc
import weakref

import torch

from breakable_cudagraph import BreakableCUDAGraphCapture, EagerStep, eager_break_during_capture


@eager_break_during_capture
def add_one(t: torch.Tensor) -> None:
    t.add_(1)


def _held_arguments(capture: BreakableCUDAGraphCapture) -> list[torch.Tensor]:
    return [s.call.args[0] for s in capture.segments if isinstance(s, EagerStep)]


def test_outside_tensor_given_to_every_break_is_held_itself_and_released_by_reset(
    bcg_device: str,
) -> None:
    x = torch.zeros(8, device=bcg_device)
    y = torch.zeros(8, device=bcg_device)
    capture = BreakableCUDAGraphCapture()
    with capture:
        for _ in range(3):
            x.mul_(2)
            add_one(y)
    assert all(held is y for held in _held_arguments(capture))
    assert capture._pool_memory.held == {}  # the record ends with the capture
    probe = weakref.ref(y)
    y.zero_()
    capture.replay()
    assert torch.equal(y, torch.full_like(y, 3.0))
    del y
    gc.collect()
    assert probe() is not None  # the steps hold it
    capture.reset()
    gc.collect()
    assert probe() is None


def test_tensor_moved_into_the_pool_after_a_break_is_aliased_at_the_next(
    bcg_device: str,
) -> None:
    t = torch.zeros(8, device=bcg_device)
    outside_ptr = t.data_ptr()
    capture = BreakableCUDAGraphCapture()
    with capture:
        add_one(t)
        inside = torch.ones(8, device=bcg_device) * 2  # pool memory
        t.set_(inside.untyped_storage(), 0, (8,), (1,))
        add_one(t)
    first, second = _held_arguments(capture)
    assert first is t
    assert second is not t and second.data_ptr() == t.data_ptr() != outside_ptr
