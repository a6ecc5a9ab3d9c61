"""One GPU per pytest-xdist worker: the round-robin choice, and (on GPUs) that a worker
really sees only the GPU it was given."""

from __future__ import annotations

import os

import pytest
import torch

from verification.plugin.workers import gpu_for_worker, visible_gpus, worker_index


def test_workers_go_round_robin_over_the_visible_gpus():
    gpus = visible_gpus({}, 2)
    assert [gpu_for_worker(f"gw{i}", gpus) for i in range(5)] == ["0", "1", "0", "1", "0"]


def test_several_workers_share_a_single_gpu():
    assert {gpu_for_worker(f"gw{i}", visible_gpus({}, 1)) for i in range(8)} == {"0"}


def test_existing_cuda_visible_devices_is_respected():
    gpus = visible_gpus({"CUDA_VISIBLE_DEVICES": "3, GPU-ab12,"}, 8)
    assert gpus == ["3", "GPU-ab12"]
    assert gpu_for_worker("gw1", gpus) == "GPU-ab12"


def test_non_xdist_worker_id_is_rejected():
    with pytest.raises(ValueError, match="master"):
        worker_index("master")


@pytest.mark.gpu
def test_xdist_worker_sees_exactly_its_own_gpu(pytestconfig):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None or not pytestconfig.getini("bcg_gpu_per_worker"):
        pytest.skip("runs under pytest-xdist with bcg_gpu_per_worker on")
    visible = os.environ["CUDA_VISIBLE_DEVICES"]
    assert "," not in visible and torch.cuda.device_count() == 1
    assert torch.cuda.current_device() == 0
