"""Tests for the capture's record of break arguments it already holds strongly (issue 23).

A tensor from outside the pool given to many breaks is looked up once; the record must not
change what is held (a tensor whose storage moved into the pool is aliased again), nor outlive
the capture's hold on it (``reset()`` releases it). The pool lookup behind it asks the
allocator's snapshot for the capture's pool alone where torch allows.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
import torch

from breakable_cudagraph import BreakableCUDAGraphCapture, EagerStep, eager_break_during_capture
from breakable_cudagraph.arguments import PoolMemory


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


def test_pool_lookup_asks_the_snapshot_for_the_pool_alone_where_torch_can(
    bcg_device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = (0, 7)
    segment = {"address": 4096, "total_size": 2048, "segment_pool_id": pool}
    calls: list[dict[str, Any]] = []

    def snapshot(mempool_id: Any = None, include_traces: bool = True) -> list[dict[str, Any]]:
        calls.append({"mempool_id": mempool_id, "include_traces": include_traces})
        return [segment]

    monkeypatch.setattr(torch.cuda, "memory_snapshot", snapshot)
    assert PoolMemory(pool).addresses_in_pool([4096, 8192]) == {4096}
    assert calls == [{"mempool_id": pool, "include_traces": False}]
    # A torch whose snapshot takes neither keyword is asked for the whole snapshot.
    monkeypatch.setattr(torch.cuda, "memory_snapshot", lambda: [segment])
    assert PoolMemory(pool).addresses_in_pool([4096, 8192]) == {4096}
