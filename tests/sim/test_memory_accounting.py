"""Memory statistics count what CUDA's caching allocator counts.

The tests on ``bcg_device`` hold on the H200 (torch 2.11) and on the simulator: a capture's
growth of ``memory_allocated`` includes the 1 KiB of device seed and offset torch's
generator keeps while any graph lives, blocks round up to 512 bytes, and
``max_memory_allocated`` follows ``reset_peak_memory_stats``. The simulator-only tests pin
the segment sizes of CUDA's allocator, which a GPU process's cache would blur.
``bench/probes/memory_accounting.py`` prints all of these figures on a GPU.
"""

from __future__ import annotations

import gc

import pytest
import torch

from verification.sim import simulated_cuda

KIB, MIB = 1 << 10, 1 << 20
# What torch's CUDA generator allocates when the first graph registers with it: a device
# seed and offset, one int64 each, a 512-byte block each.
GENERATOR_EXTRAGRAPH = 2 * 512


def _capture_output_of(x: torch.Tensor) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        graph.capture_begin()
        out = x * 2
        graph.capture_end()
    torch.cuda.current_stream().wait_stream(side)
    return graph, out


def test_a_capture_of_one_256k_output_grows_allocated_memory_as_on_the_h200(bcg_device):
    gc.collect()  # no graph of an earlier test may still hold the generator's memory
    x = torch.ones(64 * KIB, device=bcg_device)  # 256 KiB of float32
    x.mul_(2)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    first, first_out = _capture_output_of(x)
    assert torch.cuda.memory_allocated() - before == 263168  # the H200's figure
    second, second_out = _capture_output_of(x)
    assert torch.cuda.memory_allocated() - before == 263168 + 256 * KIB
    del first, first_out, second, second_out
    gc.collect()
    assert torch.cuda.memory_allocated() == before


@pytest.mark.parametrize(
    ("request_bytes", "block_bytes"),
    [(1, 512), (511, 512), (512, 512), (513, 1024), (MIB, MIB), (MIB + 1, MIB + 512)],
)
def test_a_block_is_the_request_rounded_up_to_512_bytes(bcg_device, request_bytes, block_bytes):
    torch.cuda.empty_cache()  # a cached large block too small to split would be taken whole
    before = torch.cuda.memory_allocated()
    t = torch.empty(request_bytes, dtype=torch.uint8, device=bcg_device)
    assert torch.cuda.memory_allocated() - before == block_bytes
    del t
    assert torch.cuda.memory_allocated() == before


def test_peak_is_the_current_allocation_after_a_reset(bcg_device):
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    big = torch.empty(4 * MIB, dtype=torch.uint8, device=bcg_device)
    assert torch.cuda.max_memory_allocated() >= base + 4 * MIB
    del big
    assert torch.cuda.max_memory_allocated() >= base + 4 * MIB  # freeing keeps the peak
    torch.cuda.reset_peak_memory_stats()
    assert torch.cuda.max_memory_allocated() == torch.cuda.memory_allocated() == base
    small = torch.empty(MIB, dtype=torch.uint8, device=bcg_device)
    assert torch.cuda.max_memory_allocated() == base + MIB
    del small
    assert torch.cuda.max_memory_allocated() == base + MIB
    assert torch.cuda.memory_stats()["allocated_bytes.all.peak"] == base + MIB


@pytest.mark.sim
def test_a_block_freed_in_another_pool_is_not_in_a_later_peak():
    with simulated_cuda():
        x = torch.ones(64 * KIB, device="cuda")
        graph, out = _capture_output_of(x)
        base = torch.cuda.memory_allocated()
        del out  # its block, in the graph's pool, is free from now on
        torch.cuda.reset_peak_memory_stats()
        y = torch.empty(512 * KIB, dtype=torch.uint8, device="cuda")  # the default pool
        assert torch.cuda.max_memory_allocated() == base - 256 * KIB + 512 * KIB
        del graph, y


@pytest.mark.sim
@pytest.mark.parametrize(
    ("request_bytes", "segment_bytes"),
    [(1, 2 * MIB), (MIB, 2 * MIB), (MIB + 1, 20 * MIB), (5 * MIB, 20 * MIB), (12 * MIB, 12 * MIB)],
)
def test_segments_are_sized_as_cudas_caching_allocator_sizes_them(request_bytes, segment_bytes):
    with simulated_cuda():
        t = torch.empty(request_bytes, dtype=torch.uint8, device="cuda")
        assert torch.cuda.memory_reserved() == segment_bytes
        del t


@pytest.mark.sim
def test_small_blocks_share_a_segment_and_large_ones_do_not_use_it():
    with simulated_cuda():
        a = torch.empty(1000, dtype=torch.uint8, device="cuda")
        b = torch.empty(3000, dtype=torch.uint8, device="cuda")
        assert torch.cuda.memory_allocated() == 1024 + 3072
        assert torch.cuda.memory_reserved() == 2 * MIB
        c = torch.empty(MIB + 1, dtype=torch.uint8, device="cuda")
        assert torch.cuda.memory_reserved() == 22 * MIB
        del a, b, c
        torch.cuda.empty_cache()
        assert torch.cuda.memory_reserved() == 0


@pytest.mark.sim
def test_a_fresh_block_carved_from_a_segment_holds_poison():
    with simulated_cuda():
        first = torch.empty(256, dtype=torch.int16, device="cuda")
        later = torch.empty(256, dtype=torch.int16, device="cuda")  # same 2 MiB segment
        assert first.untyped_storage().data_ptr() + 512 == later.untyped_storage().data_ptr()
        assert bool((later.cpu() == 0x7FFF).all())


def test_an_empty_tensor_takes_no_block_eagerly_or_in_a_capture(bcg_device):
    x = torch.ones(4, device=bcg_device)
    before = torch.cuda.memory_allocated()
    empty, moved = torch.empty(0, device=bcg_device), torch.empty(0).to(bcg_device)
    assert torch.cuda.memory_allocated() == before
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        graph.capture_begin()
        begun = torch.cuda.memory_allocated()
        nothing = x[:0] * 2
        assert torch.cuda.memory_allocated() == begun
        something = x + 1
        graph.capture_end()
    torch.cuda.current_stream().wait_stream(side)
    graph.replay()
    assert nothing.numel() == 0 and torch.equal(something, torch.full_like(x, 2))
    del empty, moved


def test_a_capture_begin_refused_on_the_default_stream_registers_the_generator(bcg_device):
    # The H200's figures: the first graph registered with the generator allocates its device
    # seed and offset (two 512-byte blocks) even when its capture_begin is then refused; a
    # graph registering while another lives allocates nothing; both gone, so is the memory.
    # An earlier test's graph may still live here, so the first figure may be either.
    gc.collect()
    before = torch.cuda.memory_allocated()
    first, second = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="non-default stream"):
        first.capture_begin()
    registered = torch.cuda.memory_allocated()
    assert registered - before in (0, 1024)
    with pytest.raises(RuntimeError, match="non-default stream"):
        second.capture_begin()
    assert torch.cuda.memory_allocated() == registered
    del first, second
    gc.collect()
    assert torch.cuda.memory_allocated() == before
