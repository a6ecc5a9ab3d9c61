"""Tests for the capture's record of break arguments it already holds strongly.

A tensor from outside the pool given to many breaks is looked up once; the record must not
change what is held (a tensor whose storage moved into the pool is aliased again), nor outlive
the capture's hold on it (``reset()`` releases it). The pool lookup behind it asks the
allocator's snapshot for the capture's pool alone where torch allows.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from breakable_cudagraph import (
    BreakableCUDAGraphCapture,
    EagerStep,
    arguments,
    eager_break_during_capture,
)


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


@eager_break_during_capture
def add_rows(out: torch.Tensor, table: torch.Tensor) -> None:
    out.add_(table[: out.shape[0]])


def _per_size_loop(
    pool: object, buffer: torch.Tensor, table: torch.Tensor, sizes: list[int]
) -> list[tuple[BreakableCUDAGraphCapture, torch.Tensor]]:
    captured = []
    for size in sizes:  # an engine's runner: one capture per size, largest first, one pool
        with BreakableCUDAGraphCapture(pool=pool) as capture:
            h = buffer[:size]  # the runner's static buffer, sliced per size
            h.mul_(2)
            add_rows(h, table)
            out = h * 2
        captured.append((capture, out))
    return captured


def test_captures_of_one_pool_share_what_they_know_of_it_while_one_holds_graphs(
    bcg_device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshots = []
    take = torch.cuda.memory_snapshot
    monkeypatch.setattr(
        torch.cuda, "memory_snapshot", lambda *a, **k: snapshots.append(1) or take(*a, **k)
    )
    table = torch.randn(16, 4, device=bcg_device)  # a weight: outside the pool
    buffer = torch.randn(16, 4, device=bcg_device)
    pool = torch.cuda.graph_pool_handle()
    captured = _per_size_loop(pool, buffer, table, [16, 8, 4, 2, 1])
    # The first capture looks the buffer and the weight up; the later sizes know both.
    assert len(snapshots) == 1, f"{len(snapshots)} allocator snapshots for 5 captures of a pool"
    for capture, out in captured:
        start = buffer.clone()
        capture.replay()
        n = out.shape[0]
        assert torch.equal(buffer[:n], start[:n] * 2 + table[:n])
        assert torch.equal(out, buffer[:n] * 2)
    # Once no capture of the pool holds a graph, the pool is released (torch refuses to
    # capture into it again) and nothing of what was known of it is kept.
    for capture, _ in captured[1:]:
        capture.reset()
    assert arguments._SHARED.get(tuple(pool)) is captured[0][0]._pool_memory._answers
    captured[0][0].reset()
    assert arguments._SHARED.get(tuple(pool)) is None


def test_a_failed_capture_stops_sharing_its_pool_record(bcg_device: str) -> None:
    pool = torch.cuda.graph_pool_handle()
    table = torch.randn(4, 4, device=bcg_device)
    ((kept, _),) = _per_size_loop(pool, torch.zeros(4, 4, device=bcg_device), table, [4])
    failing = BreakableCUDAGraphCapture(pool=pool)
    with pytest.raises(ValueError, match="planted"):
        with failing:
            add_rows(torch.zeros(4, 4, device=bcg_device), table)
            raise ValueError("planted")
    assert failing._pool_memory._answers is not kept._pool_memory._answers
    assert failing._pool_memory.held == {}
