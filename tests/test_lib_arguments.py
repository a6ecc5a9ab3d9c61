"""Tests for how break arguments are held: tree walking, non-owning aliases, pool ownership."""

from __future__ import annotations

import collections
import dataclasses
import gc
import weakref
from typing import NamedTuple

import torch

from breakable_cudagraph import BreakableCUDAGraphCapture, eager_break_during_capture
from breakable_cudagraph.arguments import (
    PoolMemory,
    hold_call_arguments,
    hold_for_replay,
    non_owning_alias,
)
from breakable_cudagraph.trees import map_tensors, tensor_leaves


class Pair(NamedTuple):
    a: torch.Tensor
    b: int


@dataclasses.dataclass(frozen=True)
class Frozen:
    t: torch.Tensor
    name: str


@eager_break_during_capture
def copy_scaled(out: torch.Tensor, src: torch.Tensor) -> None:
    out.copy_(src * 10)


def _storage_use_count(t: torch.Tensor) -> int:
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata)


def test_tree_walk_rebuilds_every_container_kind(bcg_device: str) -> None:
    t1, t2, t3 = (torch.full((2,), float(i), device=bcg_device) for i in range(3))
    factory = collections.defaultdict(list, {"k": t3})
    tree = ([t1, Pair(t2, 7)], {"d": Frozen(t3, "n")}, factory, "leaf")
    doubled = map_tensors(tree, lambda t: t * 2)
    assert isinstance(doubled[0][1], Pair) and doubled[0][1].b == 7
    assert isinstance(doubled[1]["d"], Frozen) and doubled[1]["d"].name == "n"
    assert isinstance(doubled[2], collections.defaultdict) and doubled[2].default_factory is list
    assert doubled[3] == "leaf"
    assert [t.tolist() for t in tensor_leaves(doubled)] == [[0, 0], [2, 2], [4, 4], [4, 4]]
    assert tensor_leaves(tree)[0] is t1


def test_non_owning_alias_shares_memory_without_owning_it(bcg_device: str) -> None:
    base = torch.arange(12, dtype=torch.float32, device=bcg_device)
    view = base[2:].view(2, 5)[:, ::2]
    count = _storage_use_count(base)
    alias = non_owning_alias(view)
    assert alias.data_ptr() == view.data_ptr()
    assert alias.stride() == view.stride() and alias.shape == view.shape
    assert _storage_use_count(base) == count
    base.add_(1)
    assert torch.equal(alias, view)


def test_pool_memory_tells_capture_tensors_from_outside_tensors(bcg_device: str) -> None:
    outside = torch.ones(64, device=bcg_device)
    capture = BreakableCUDAGraphCapture()
    with capture:
        inside = outside * 2
    pool = PoolMemory(capture.pool)
    inside_ptr = inside.untyped_storage().data_ptr()
    outside_ptr = outside.untyped_storage().data_ptr()
    assert pool.addresses_in_pool([inside_ptr, outside_ptr]) == {inside_ptr}
    held_inside, held_outside = hold_for_replay((inside, outside), pool)
    assert held_outside is outside
    assert held_inside is not inside and held_inside.data_ptr() == inside.data_ptr()


def test_call_arguments_are_held_as_the_tree_walk_holds_them(bcg_device: str) -> None:
    outside = torch.ones(64, device=bcg_device)
    capture = BreakableCUDAGraphCapture()
    with capture:
        inside = outside * 2
    pool = PoolMemory(capture.pool)
    calls = [
        ((inside, outside, inside, 3, None, "s"), {}),  # flat: held without the tree walk
        ((inside, [inside, outside]), {}),  # a list: the tree walk
        ((outside,), {"scale": inside}),  # keywords: the tree walk
        ((outside, 2.5), {}),  # nothing in the pool: the same tuple back
    ]
    for args, kwargs in calls:
        fast_args, fast_kwargs = hold_call_arguments(args, kwargs, pool)
        walked_args, walked_kwargs = hold_for_replay((args, kwargs), pool)
        assert (fast_args is args) == (walked_args is args)
        assert (fast_kwargs is kwargs) == (walked_kwargs is kwargs)
        for fast, walked, given in zip(
            tensor_leaves((fast_args, fast_kwargs)),
            tensor_leaves((walked_args, walked_kwargs)),
            tensor_leaves((args, kwargs)),
        ):
            assert (fast is given) == (walked is given)  # aliased in both or held in both
            assert fast.data_ptr() == given.data_ptr() and fast.stride() == given.stride()
        assert [type(a) for a in fast_args] == [type(a) for a in walked_args]


def test_outside_tensor_survives_caller_dropping_it_and_memory_churn(bcg_device: str) -> None:
    x = torch.zeros(256, device=bcg_device)
    out = torch.zeros(256, device=bcg_device)
    capture = BreakableCUDAGraphCapture()
    with capture:
        y = x + 1
        copy_scaled(out, y)
    src = torch.full((256,), 7.0, device=bcg_device)
    probe = weakref.ref(src)
    with capture.__class__() as second:
        copy_scaled(out, src)
    del src
    gc.collect()
    assert probe() is not None  # held strongly: it is not a capture intermediate
    churn = [torch.full((256,), -1.0, device=bcg_device) for _ in range(32)]
    torch.cuda.empty_cache()
    churn += [torch.full((256,), -2.0, device=bcg_device) for _ in range(32)]
    second.replay()
    assert torch.equal(out, torch.full_like(out, 70.0))
    x.fill_(2.0)
    capture.replay()
    assert torch.equal(out, torch.full_like(out, 30.0))
    del churn


def test_capture_intermediate_passed_to_break_dies_when_caller_drops_it(bcg_device: str) -> None:
    x = torch.zeros(128, device=bcg_device)
    out = torch.zeros(128, device=bcg_device)
    capture = BreakableCUDAGraphCapture()
    with capture:
        y = x + 1
        copy_scaled(out, y)
        z = out + 1
    probe = weakref.ref(y)
    storage = y.untyped_storage()
    assert _storage_use_count(y) == 2  # y and `storage`: nothing in the capture owns it
    del y
    gc.collect()
    assert probe() is None
    assert torch._C._storage_Use_Count(storage._cdata) == 1
    del storage
    x.fill_(4.0)
    capture.replay()
    assert torch.equal(out, torch.full_like(out, 50.0))
    assert torch.equal(z, torch.full_like(z, 51.0))


def test_capture_intermediate_returned_in_place_is_not_retained(bcg_device: str) -> None:
    x = torch.zeros(16, device=bcg_device)

    @eager_break_during_capture
    def bump(t: torch.Tensor) -> torch.Tensor:
        return t.add_(1)

    capture = BreakableCUDAGraphCapture()
    with capture:
        y = bump(x * 2)
        z = y * 3
    probe = weakref.ref(y)
    del y
    gc.collect()
    assert probe() is None
    x.fill_(1.0)
    capture.replay()
    assert torch.equal(z, torch.full_like(z, 9.0))
