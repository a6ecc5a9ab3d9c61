"""The simulator's own contract: patch/restore, nesting, threads, poison and pools.

These tests enter ``simulated_cuda()`` themselves (no ``bcg_device`` fixture), so they
exercise the simulator on any machine, GPU or not.
"""

from __future__ import annotations

import threading

import pytest
import torch

from verification.sim import DEFAULT_POOL_ID, is_active, simulated_cuda

_PATCHED = ("CUDAGraph", "Stream", "Event", "synchronize", "current_stream", "memory_reserved")


def _originals():
    return {name: getattr(torch.cuda, name) for name in _PATCHED} | {
        "graphs.CUDAGraph": torch.cuda.graphs.CUDAGraph,
        "Tensor.to": torch.Tensor.to,
        "torch.tensor": torch.tensor,
        "bootstrap": threading.Thread._bootstrap_inner,
    }


def test_exit_restores_every_patched_name_after_an_exception():
    before = _originals()
    with pytest.raises(ValueError, match="boom"), simulated_cuda():
        assert torch.cuda.CUDAGraph is not before["CUDAGraph"]
        assert torch.cuda.is_available()
        raise ValueError("boom")
    assert _originals() == before
    assert not is_active()


def test_nested_simulated_cuda_keeps_patches_until_outermost_exit():
    before = _originals()
    with simulated_cuda():
        patched = torch.cuda.Stream
        with simulated_cuda():
            assert torch.cuda.Stream is patched
            s = torch.cuda.Stream()
        assert torch.cuda.Stream is patched
        assert torch.cuda.current_stream() != s
    assert _originals() == before


def test_thread_started_inside_inherits_the_dispatch_mode():
    with simulated_cuda():
        before = torch.cuda.memory_allocated()
        box = {}
        t = threading.Thread(
            target=lambda: box.setdefault("t", torch.ones(1000, device="cuda") * 2)
        )
        t.start()
        t.join()
        assert torch.cuda.memory_allocated() - before >= 4000, "thread op landed in a block"
        assert torch.equal(box["t"], torch.full((1000,), 2.0, device="cuda"))


def test_threads_entering_concurrently_share_one_session():
    before = _originals()
    barrier = threading.Barrier(2)
    errors = []

    def worker():
        try:
            with simulated_cuda():
                barrier.wait()
                s = torch.cuda.Stream()
                with torch.cuda.stream(s):
                    assert torch.cuda.current_stream() == s
                barrier.wait()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert _originals() == before


def test_fresh_capture_output_holds_the_ff7f_poison_bytes():
    with simulated_cuda():
        x = torch.ones(16, dtype=torch.int32, device="cuda")
        s = torch.cuda.Stream()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(s):
            g.capture_begin()
            y = x + 1
            g.capture_end()
        raw = y.view(torch.uint8)
        assert raw[0::2].eq(0xFF).all() and raw[1::2].eq(0x7F).all()
        g.replay()
        assert torch.equal(y, torch.full_like(y, 2))


def test_eager_outputs_live_in_default_pool_and_capture_outputs_in_private_pool():
    with simulated_cuda():
        x = torch.ones(100, device="cuda") + 1
        s = torch.cuda.Stream()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(s):
            g.capture_begin()
            y = x * 2
            g.capture_end()
        pools = {seg["address"]: seg["segment_pool_id"] for seg in torch.cuda.memory_snapshot()}
        assert pools[x.untyped_storage().data_ptr()] == DEFAULT_POOL_ID
        assert pools[y.untyped_storage().data_ptr()] == g.pool()


def test_reset_graph_pool_is_released_by_empty_cache_once_unused():
    with simulated_cuda():
        x = torch.ones(1000, device="cuda")
        s = torch.cuda.Stream()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(s):
            g.capture_begin()
            y = (x * 2) + 1
            g.capture_end()
        torch.cuda.empty_cache()
        held = torch.cuda.memory_reserved()
        g.reset()
        torch.cuda.empty_cache()
        # As CUDA's allocator, a segment is released whole: the intermediate's block shares
        # its 2 MiB segment with y's.
        assert torch.cuda.memory_reserved() == held, "segment kept while y uses part of it"
        del y
        torch.cuda.empty_cache()
        assert torch.cuda.memory_reserved() < held, "segment released once unused"


def test_host_tensor_operand_of_a_captured_op_must_be_zero_dim():
    with simulated_cuda():
        x = torch.ones(8, device="cuda")
        with pytest.raises(RuntimeError, match="same device"):
            x * torch.ones(8)


def test_device_tensors_are_cuda_tensors_over_simulator_memory():
    with simulated_cuda():
        for make in (
            lambda: torch.ones(3, device="cuda"),
            lambda: torch.ones(3, device="cuda:0"),
            lambda: torch.ones(3, device=torch.device("cuda")),
            lambda: torch.ones(3).cuda(),
            lambda: torch.ones(3).to("cuda"),
            lambda: torch.tensor([1.0, 1.0, 1.0], device="cuda"),
            lambda: torch.as_tensor([1.0, 1.0, 1.0], device="cuda"),
        ):
            x = make()
            assert type(x) is torch.Tensor and x.is_cuda
            assert x.device == torch.device("cuda", 0)
            assert torch.cuda.memory_allocated() >= 12
            back = x.cpu()
            assert not back.is_cuda and torch.equal(back, torch.ones(3))
            with pytest.raises(TypeError, match="cuda"):
                x.numpy()
        assert x.to(dtype=torch.float, device=x.device) is x
        assert x.to(torch.device("cuda", 0), torch.float16).dtype == torch.float16
        assert "device='cuda:0'" in repr(x)


def test_host_tensors_stay_cpu_tensors_and_run_eagerly_during_capture():
    with simulated_cuda():
        s = torch.cuda.Stream()
        g = torch.cuda.CUDAGraph()
        host = torch.arange(4.0)
        with torch.cuda.stream(s):
            g.capture_begin()
            y = torch.ones(2, device="cuda") + 1
            doubled = host * 2
            assert doubled.tolist() == [0.0, 2.0, 4.0, 6.0] and doubled.sum().item() == 12
            g.capture_end()
        assert not doubled.is_cuda
        g.replay()
        assert torch.equal(y.cpu(), torch.full((2,), 2.0))


def test_peer_package_builds_its_replay_aliases_over_device_memory():
    bcgs = pytest.importorskip("breakable_cuda_graphs")
    with simulated_cuda():
        x = torch.ones(4, device="cuda")
        alias = bcgs._make_replay_tensor_alias(x)
        assert alias.is_cuda and alias.data_ptr() == x.data_ptr()
        x.add_(1)
        assert torch.equal(alias, x)


def test_replay_without_capture_raises():
    with simulated_cuda():
        with pytest.raises(RuntimeError, match="without a preceding successful capture"):
            torch.cuda.CUDAGraph().replay()


def test_set_on_a_device_tensor_accepts_every_overload_and_default_strides():
    with simulated_cuda():
        x = torch.arange(6.0, device="cuda")
        storage = x.untyped_storage()
        a = torch.empty(0, device="cuda").set_(storage, 0, (2, 3))
        b = torch.empty(0, device="cuda").set_(storage)
        c = torch.empty(0, device="cuda").set_(x)
        assert a.stride() == (3, 1) and torch.equal(a.flatten(), x)
        assert torch.equal(b[:6], x) and torch.equal(c, x) and c.data_ptr() == x.data_ptr()
