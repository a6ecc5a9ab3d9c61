"""Tests for how break arguments are held: tree walking, non-owning aliases, pool ownership."""

from __future__ import annotations

import collections
import dataclasses
import gc
import weakref
from typing import NamedTuple

import pytest
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
        fast_args, fast_kwargs, _ = hold_call_arguments(args, kwargs, pool)
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


def test_one_alias_stands_for_every_pool_tensor_of_one_description(bcg_device: str) -> None:
    capture = BreakableCUDAGraphCapture()
    with capture:
        inside = torch.ones(2, 6, device=bcg_device) * 2
    pool = PoolMemory(capture.pool)
    again = inside.view(2, 6)  # another tensor, the same storage, offset, shape and strides
    rows, flat, bits = inside[0], inside.view(12), inside.view(torch.int32)
    (a, b, c, d), _, _ = hold_call_arguments((inside, again, rows, flat), {}, pool)
    assert a is b  # what the break is given at replay cannot tell them apart
    # Views that start where it does keep their own shape and strides: never one alias for all.
    assert (c.shape, d.shape) == ((6,), (12,)) and len({id(a), id(c), id(d)}) == 3
    assert all(t.data_ptr() == inside.data_ptr() for t in (a, c, d))
    (held,), _ = hold_for_replay(((inside,), {}), pool)
    assert held is a  # the tree walk shares them too
    (other,), _, _ = hold_call_arguments((bits,), {}, pool)  # same place and shape, other dtype
    assert other.dtype == torch.int32 and other is not bits and torch.equal(other, bits)
    pool.detach()  # what the pool was known to hold goes with its last graph
    (fresh,), _, _ = hold_call_arguments((inside,), {}, pool)
    assert fresh is not a and fresh.data_ptr() == inside.data_ptr()


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


@eager_break_during_capture
def copy_into(out: torch.Tensor, src: torch.Tensor) -> None:
    out.copy_(src)


def test_conj_view_made_in_the_pool_keeps_its_conj_bit_at_replay(bcg_device: str) -> None:
    x = torch.zeros(3, dtype=torch.complex64, device=bcg_device)
    out = torch.empty_like(x)
    with BreakableCUDAGraphCapture() as capture:
        copy_into(out, (x * 1).conj())
    x.copy_(torch.tensor([1 + 2j, 3 - 1j, -2j], device=bcg_device))
    capture.replay()
    assert torch.equal(out, x.conj())


def test_one_byte_pool_tensor_passed_to_a_break_is_not_owned_by_the_capture(
    bcg_device: str,
) -> None:
    # The smallest real storage is still pool memory: only empty storages are held strongly.
    x = torch.zeros(1, dtype=torch.uint8, device=bcg_device)
    out = torch.zeros_like(x)
    with BreakableCUDAGraphCapture() as capture:
        y = x + 1
        copy_into(out, y)
    probe = weakref.ref(y)
    del y
    gc.collect()
    assert probe() is None
    x.fill_(4)
    capture.replay()
    assert out.item() == 5


def test_add_eager_call_holds_pool_arguments_without_owning_them(bcg_device: str) -> None:
    # add_eager_call holds its arguments as the decorator does: a capture intermediate it was
    # given dies with the caller's last reference, and replay still reads its memory.
    x = torch.zeros(64, device=bcg_device)
    out = torch.zeros_like(x)
    with BreakableCUDAGraphCapture() as capture:
        y = x + 1
        capture.add_eager_call(out.copy_, (y,), {})
    probe = weakref.ref(y)
    del y
    gc.collect()
    assert probe() is None
    x.fill_(4)
    capture.replay()
    assert torch.equal(out, torch.full_like(out, 5))


@pytest.mark.gpu  # the simulator has no sparse device tensors
def test_sparse_tensor_given_to_a_break_is_held_as_it_is(bcg_device: str) -> None:
    # A sparse tensor has no storage to alias: asking for one raises, so it must be held.
    indices = torch.tensor([[0, 2]], device=bcg_device)
    sparse = torch.sparse_coo_tensor(indices, torch.ones(2, device=bcg_device), (4,))
    out = torch.zeros(4, device=bcg_device)

    @eager_break_during_capture
    def densify(s: torch.Tensor, o: torch.Tensor) -> None:
        o.copy_(s.to_dense())

    with BreakableCUDAGraphCapture() as capture:
        densify(sparse, out)
    out.zero_()
    capture.replay()
    assert out.tolist() == [1.0, 0.0, 1.0, 0.0]


def test_pool_memory_ranges_include_the_segment_start_and_exclude_its_end(
    bcg_device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a GPU another pool's segment can start exactly where this pool's segment ends; a
    # tensor there is not pool memory and must be held strongly, not by a non-owning alias.
    from breakable_cudagraph.arguments import PoolMemory

    pool = (7, 0)
    segments = [
        {"address": 4096, "total_size": 2048, "segment_pool_id": pool},
        {"address": 6144, "total_size": 2048, "segment_pool_id": (0, 0)},
    ]
    monkeypatch.setattr(torch.cuda, "memory_snapshot", lambda: segments)
    memory = PoolMemory(pool)
    assert memory.addresses_in_pool([4095, 4096, 5000, 6143, 6144]) == {4096, 5000, 6143}


def test_object_with_a_fields_attribute_that_is_no_tuple_is_a_leaf(bcg_device: str) -> None:
    # Only tuples with _fields are namedtuples; other objects (ast nodes, records) are held
    # whole, as any non-container argument.
    class Record:
        _fields = ("value",)

        def __init__(self, value: torch.Tensor) -> None:
            self.value = value

    @eager_break_during_capture
    def copy_from_record(out: torch.Tensor, record: Record) -> None:
        out.copy_(record.value)

    x = torch.ones(2, device=bcg_device)
    out = torch.empty_like(x)
    with BreakableCUDAGraphCapture() as capture:
        copy_from_record(out, Record(x))
    x.fill_(5)
    capture.replay()
    assert torch.equal(out, x)


class _Marked(torch.Tensor):
    """A tensor subclass, as models carry (quantized or distributed tensor wrappers)."""


def test_tensor_subclass_made_in_the_pool_reaches_the_break_as_it_was_given(
    bcg_device: str,
) -> None:
    # Only plain tensors are aliased: an alias of a subclass would lose what the subclass
    # carries (here a Python attribute), so a subclass is held as it is.
    x = torch.ones(4, device=bcg_device)
    out = torch.empty_like(x)
    seen: list[tuple[type, object]] = []

    @eager_break_during_capture
    def record(t: torch.Tensor) -> None:
        seen.append((type(t), getattr(t, "tag", None)))
        out.copy_(t.as_subclass(torch.Tensor))

    with BreakableCUDAGraphCapture() as capture:
        marked = (x * 2).as_subclass(_Marked)
        marked.tag = "scale 2"
        record(marked)
    capture.replay()
    assert seen == [(_Marked, "scale 2")] * 2
