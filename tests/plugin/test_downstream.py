"""A downstream project, as a new user would have it: this project built into a wheel and
installed (not editable) into a fresh venv, and a throwaway engine package outside this
repo, with its own conftest and its own hypothesis profile ``ci``, whose plain ``pytest``
picks the ``bcg`` plugin up from the entry point and fuzzes the engine's own break op.

To stay cheap the venv reaches torch, pytest and hypothesis in this interpreter's
site-packages through a ``.pth`` line; the project itself comes only from the wheel.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import hypothesis
import pytest
import setuptools
import torch

from verification.plugin.shard import Shard

ROOT = Path(__file__).resolve().parents[2]
SOURCES = (
    "pyproject.toml",
    "README.md",
    "bcg_pytest_plugin.py",
    "breakable_cudagraph",
    "verification",
)

ENGINE_CONFTEST = """
from hypothesis import settings

# The engine's own profile: the plugin must neither replace nor load over it.
settings.register_profile("ci", max_examples=30, deadline=None)
settings.load_profile("ci")
"""

ENGINE_OPS = '''
import torch


def normalize_by_max(x: torch.Tensor, out: torch.Tensor) -> None:
    """The engine's break op: .item() cannot be captured, so it must run eagerly."""
    out.copy_(x / max(x.abs().max().item(), 1e-6))
'''

ENGINE_TESTS = """
import importlib
import os

import torch
from hypothesis import given, settings, strategies as st

from engine_ops import normalize_by_max


def test_project_is_the_installed_wheel_and_the_engine_profile_is_untouched():
    import breakable_cudagraph, verification

    site = os.environ["ENGINE_SITE_PACKAGES"]
    assert verification.__file__.startswith(site), verification.__file__
    assert breakable_cudagraph.__file__.startswith(site), breakable_cudagraph.__file__
    assert settings.get_profile("ci").max_examples == 30
    assert settings.default.max_examples == 30


values = st.lists(st.floats(-1e3, 1e3, width=32), min_size=1, max_size=16)


@given(values, values)
def test_break_op_replays_like_eager(bcg_device, bcg_target, first, second):
    bcg = importlib.import_module(bcg_target)
    brk = bcg.eager_break_during_capture(normalize_by_max)
    second = (second * len(first))[: len(first)]
    x = torch.tensor(first, device=bcg_device)
    out = torch.empty_like(x)

    def forward():
        brk(x * 2, out)
        return out + 1

    forward()
    with bcg.BreakableCUDAGraphCapture() as capture:
        result = forward()
    x.copy_(torch.tensor(second, device=bcg_device))
    capture.replay()
    expected = torch.empty_like(x)
    normalize_by_max(x * 2, expected)
    assert torch.equal(result, expected + 1)
"""


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{argv}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def _build_wheel(tmp_path: Path) -> Path:
    source = tmp_path / "source"  # a copy, so the build leaves nothing in the checkout
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(
                ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            source.mkdir(exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    wheels = tmp_path / "wheels"
    # setuptools builds wheels by itself from 70.1 on, older ones with the wheel package;
    # otherwise (a fresh 3.11 venv has setuptools 65.5 alone) pip's isolated build fetches both.
    modern = tuple(int(p) for p in setuptools.__version__.split(".")[:2]) >= (70, 1)
    offline = modern or importlib.util.find_spec("wheel") is not None
    isolation = ["--no-build-isolation"] if offline else []
    pip = [sys.executable, "-m", "pip", "-q", "wheel", "--no-deps", *isolation]
    _run([*pip, "-w", str(wheels), str(source)], tmp_path)
    (wheel,) = wheels.glob("breakable_cudagraph-*.whl")
    return wheel


def _venv_with(wheel: Path, tmp_path: Path) -> tuple[Path, Path]:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    python = venv / "bin" / "python"
    install = [sys.executable, "-m", "pip", "-q", "--python", str(python), "install"]
    _run([*install, "--no-deps", str(wheel)], tmp_path)
    site = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
             tmp_path).strip()
    )  # fmt: skip
    shared = {str(Path(m.__file__).resolve().parent.parent) for m in (torch, pytest, hypothesis)}
    (site / "zz_shared_test_deps.pth").write_text("\n".join(sorted(shared)) + "\n")
    return python, site


def test_downstream_project_uses_the_installed_plugin_and_keeps_its_profile(
    tmp_path: Path, bcg_shard: Shard
) -> None:
    if bcg_shard.index != 0:
        pytest.skip("runs once per sharded matrix, on shard 0")
    python, site = _venv_with(_build_wheel(tmp_path), tmp_path)
    engine = tmp_path / "engine"
    (engine / "engine_ops").mkdir(parents=True)
    (engine / "tests").mkdir()
    (engine / "conftest.py").write_text(textwrap.dedent(ENGINE_CONFTEST))
    (engine / "engine_ops" / "__init__.py").write_text(textwrap.dedent(ENGINE_OPS))
    (engine / "tests" / "test_engine.py").write_text(textwrap.dedent(ENGINE_TESTS))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "BCG_", "PYTEST"))}
    env["ENGINE_SITE_PACKAGES"] = str(site)
    out = _run(
        [str(python), "-m", "pytest", "-p", "no:cacheprovider", "--bcg-device=auto", "-rA"],
        engine,
        env,
    )
    assert "2 passed" in out, out
