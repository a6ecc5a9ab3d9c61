"""The real upstream targets: vLLM's and SGLang's modules, loaded unchanged from the installed
package or a checkout (``--target-path``) with stand-ins only for what they import; a missing
package is one line and exit 2; the stand-ins behave as upstream documents."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.child_env import child_env
from verification.errors import UsageError
from verification.targets import load_target, upstream

ROOT = Path(__file__).resolve().parents[2]
VLLM_FILE = "vllm/compilation/breakable_cudagraph.py"
SGLANG_DIR = "sglang/srt/model_executor/runner_backend_utils/breakable_cuda_graph"


def _installed(package: str) -> Path:
    """Where the installed distribution lives (its metadata: the name may hold a stand-in)."""
    if os.environ.get(upstream.TARGET_PATH_ENV):
        pytest.skip("the targets load a checkout here (BCG_TARGET_PATH)")
    try:
        return Path(str(importlib.metadata.distribution(package).locate_file("")))
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{package} is not installed (pip install --no-deps {package})")


def _run(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=child_env(base={k: v for k, v in os.environ.items() if k != upstream.TARGET_PATH_ENV})
        | (env or {}),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_missing_upstream_package_is_one_line_and_exit_2(engine):
    # find_spec answering None is what an environment without the package sees.
    done = _run(
        "import importlib.util as u; u.find_spec = lambda name, *a: None\n"
        "from verification.commands.cli import main\n"
        f"raise SystemExit(main(['fuzz', '--target', 'verification.targets.{engine}']))"
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: ") and f"pip install --no-deps {engine}" in done.stderr


def test_target_path_that_is_not_a_folder_is_a_usage_error(tmp_path):
    done = _run(
        "from verification.commands.cli import main\n"
        "raise SystemExit(main(['fuzz', '--target', 'verification.targets.vllm', "
        f"'--target-path', {str(tmp_path / 'none')!r}]))"
    )
    assert done.returncode == 2 and "is not a directory" in done.stderr, done.stderr


def test_package_root_names_the_missing_file_under_a_target_path(tmp_path, monkeypatch):
    monkeypatch.setenv(upstream.TARGET_PATH_ENV, str(tmp_path))
    with pytest.raises(UsageError, match=r"needs vllm/compilation/breakable_cudagraph\.py under"):
        upstream.package_root("vllm", "compilation/breakable_cudagraph.py", "t")


@pytest.mark.parametrize(
    ("engine", "files", "origin_file"),
    [
        ("vllm", [VLLM_FILE], VLLM_FILE),
        (
            "sglang",
            [f"{SGLANG_DIR}/breakable_cuda_graph.py", f"{SGLANG_DIR}/cuda_utils.py"],
            f"{SGLANG_DIR}/breakable_cuda_graph.py",
        ),
    ],
)
def test_a_checkout_given_by_target_path_is_the_one_loaded(tmp_path, engine, files, origin_file):
    installed = _installed(engine)
    checkout = tmp_path / "checkout" / ("python" if engine == "sglang" else "")
    for relative in files:
        (checkout / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(installed / relative, checkout / relative)
    done = _run(
        f"import verification.targets.{engine} as t\nprint(t.ORIGIN); print(t._{engine}.__file__)",
        {upstream.TARGET_PATH_ENV: str(tmp_path / "checkout")},
    )
    assert done.returncode == 0, done.stderr
    origin, loaded = done.stdout.splitlines()
    assert origin.startswith("source at ") and loaded == str(checkout / origin_file)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_installed_upstream_module_is_loaded_unchanged(engine):
    installed = _installed(engine)
    target = load_target(f"verification.targets.{engine}")
    module = getattr(target.module, f"_{engine}")
    expected = installed / (
        VLLM_FILE if engine == "vllm" else f"{SGLANG_DIR}/breakable_cuda_graph.py"
    )
    assert Path(module.__file__) == expected
    assert target.version is not None
    assert target.contract.name == ("out-buffer" if engine == "vllm" else "sglang")


def test_weak_ref_stand_in_is_a_plain_non_owning_tensor_as_from_blob_makes(bcg_device):
    x = torch.arange(12.0, device=bcg_device).reshape(3, 4)[1:, 1:]
    alias = upstream.weak_ref_tensor(x)
    assert alias.data_ptr() == x.data_ptr() and alias.stride() == x.stride()
    assert torch.equal(alias, x) and type(alias) is torch.Tensor
    x.add_(1)
    assert torch.equal(alias, x)  # same memory, not a copy
    conj = torch.tensor([1 + 2j], device=bcg_device).conj()
    assert not upstream.weak_ref_tensor(conj).is_conj()  # from_blob drops the bit
    with pytest.raises(RuntimeError, match="CUDA"):
        upstream.weak_ref_tensor(torch.ones(2))


def test_weak_ref_stand_in_allocates_nothing_as_from_blob_allocates_nothing(bcg_device):
    # vLLM's wrapper builds its weak references while a capture segment is open: a byte
    # allocated there would reserve a 2 MiB graph-pool segment vLLM itself never reserves.
    x = torch.randn(64, device=bcg_device)
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.max_memory_allocated()
    alias = upstream.weak_ref_tensor(x)
    assert torch.cuda.max_memory_allocated() == before
    assert alias.data_ptr() == x.data_ptr()


def test_capture_status_stand_in_is_answered_by_the_simulator(bcg_kind, bcg_device):
    if bcg_kind != "sim":
        pytest.skip("on a GPU cuda-python answers")
    runtime = upstream.CudaRuntime()
    status = runtime.cudaStreamCaptureStatus
    side = torch.cuda.Stream()
    assert runtime.cudaStreamGetCaptureInfo(side.cuda_stream)[1] == status(0)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        graph.capture_begin()
        active = runtime.cudaStreamGetCaptureInfo(side.cuda_stream)
        torch.zeros(1, device=bcg_device).add_(1)
        graph.capture_end()
    assert active[0] == runtime.cudaError_t.cudaSuccess
    assert active[1] == status.cudaStreamCaptureStatusActive
    assert runtime.cudaStreamGetCaptureInfo(side.cuda_stream)[1] == status(0)
