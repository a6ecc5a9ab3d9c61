"""``python -m verification``: exit 0 when clean, 1 on findings, 2 with a one-line usage error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.child_env import child_env

ROOT = Path(__file__).resolve().parents[2]


def _cli(
    *args: str, extra_path: Path | None = None, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    env = child_env(*([extra_path] if extra_path else []))
    return subprocess.run(
        [sys.executable, "-m", "verification", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_clean_fuzz_exits_0_with_summary_last(bcg_kind):
    done = _cli("fuzz", "--device", bcg_kind, "--examples", "3")
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("fuzz: ") and "0 findings" in last and f"device={bcg_kind}" in last


def test_fuzz_exits_1_and_prints_a_reproducer_when_a_bug_is_found(bcg_kind, tmp_path):
    (tmp_path / "twice_target.py").write_text(
        "from verification.planted.targets import build\n"
        "globals().update({k: v for k, v in vars(build('eager_run_twice')).items() if k != '__name__'})\n"
    )
    done = _cli(
        "fuzz",
        "--target",
        "twice_target",
        "--device",
        bcg_kind,
        "--examples",
        "25",
        "--report",
        str(tmp_path / "report"),
        extra_path=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    assert "def program(" in done.stdout
    assert list((tmp_path / "report").glob("*.py"))


@pytest.mark.parametrize(
    "args",
    [
        ("fuzz", "--examples", "0"),
        ("fuzz", "--device", "tpu"),
        ("fuzz", "--target", "no_such_target_module"),
        ("fuzz", "--replays", "1"),
        ("certify", "--examples", "many"),
        ("fuzz", "--device", "sim", "--report", "/proc/no/such/dir"),
        ("certify", "--device", "sim", "--out", "/proc/no/such/dir"),
        ("certify", "--device", "sim", "--contract", "no-such-contract"),
        ("fuzz", "--device", "sim", "--contract", "no-such-contract"),
        ("certify", "--device", "sim", "--profile", "endless"),
        ("bogus",),
    ],
)
def test_usage_errors_exit_2_with_one_error_line(args):
    done = _cli(*args)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
@pytest.mark.parametrize("command", ["fuzz", "certify"])
def test_cuda_without_gpu_is_a_usage_error(command):
    done = _cli(command, "--device", "cuda")
    assert (
        done.returncode == 2 and done.stderr.startswith("error: ") and "--device sim" in done.stderr
    )


def test_certify_into_a_read_only_directory_is_a_usage_error(tmp_path):
    out = tmp_path / "read_only"
    out.mkdir()
    out.chmod(0o555)
    try:
        if os.access(out, os.W_OK):
            pytest.skip("running as a user who may write anywhere")
        done = _cli(
            "certify", "--device", "sim", "--examples", "1", "--no-sensitivity", "--out", str(out)
        )
    finally:
        out.chmod(0o755)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: --out") and not list(out.iterdir())


def test_certify_writes_certificate_and_says_when_simulated(bcg_kind, tmp_path):
    out = tmp_path / "cert"
    done = _cli(
        "certify", "--device", bcg_kind, "--examples", "3", "--no-sensitivity", "--out", str(out)
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["passed"] and cert["checks"][0]["examples"] >= 1 and cert["device"] == bcg_kind
    assert cert["contract"]["name"] == "returns"
    assert cert["simulated"] == (bcg_kind == "sim")
    assert (out / "certificate.md").exists()
    if bcg_kind == "sim":
        assert "SIMULATOR" in done.stdout
        assert (out / "certificate.md").read_text().startswith("SIMULATED")


@pytest.mark.parametrize("device", [["--device", "sim"], ["--device=sim"]])
def test_a_simulator_run_hides_any_real_gpu_from_its_processes(tmp_path, device):
    # On the H200 a `certify --device sim` asked CUDA for its devices, and its forked checks
    # then failed with "initialization error": a sim run must never reach a real GPU.
    seen = tmp_path / "seen.txt"
    (tmp_path / "env_recording_target.py").write_text(
        "import os, pathlib\n"
        f"pathlib.Path({str(seen)!r}).write_text(repr(os.environ.get('CUDA_VISIBLE_DEVICES')))\n"
        "from breakable_cudagraph import BreakableCUDAGraphCapture, eager_break_during_capture\n"
    )
    env = child_env(tmp_path)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    done = subprocess.run(
        [sys.executable, "-m", "verification", "fuzz", "--target", "env_recording_target",
         *device, "--examples", "2"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert seen.read_text() == "''"
