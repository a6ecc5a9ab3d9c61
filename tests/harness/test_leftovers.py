"""A command that fails on bad input or is interrupted leaves nothing behind: no empty
``--report``/``--out`` directory, no partial certificate. Ctrl-C is one line and exit 130;
a missing optional dependency (cosmic-ray) is reported before any work starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.child_env import child_env

ROOT = Path(__file__).resolve().parents[2]

SLOW_START_TARGET = """
import os
import pathlib

import breakable_cudagraph as _library

eager_break_during_capture = _library.eager_break_during_capture


class BreakableCUDAGraphCapture(_library.BreakableCUDAGraphCapture):
    def __init__(self, *args, **kwargs):
        pathlib.Path(os.environ["CAMPAIGN_STARTED"]).touch()  # the campaign is under way
        super().__init__(*args, **kwargs)
"""


def _said(stderr: str) -> str:
    """What a command said on stderr, less the one line a first simulator build prints."""
    lines = stderr.strip().splitlines()
    return "\n".join(line for line in lines if not line.startswith("building the CUDA"))


def _sigint_as_from_a_terminal() -> None:
    """In the command's process before it starts: Ctrl-C at its default disposition, as a
    terminal gives it. A child inherits an ignored SIGINT, and Python then installs no
    KeyboardInterrupt for it: a worker of this suite was seen to have it ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _env(*paths: Path, **extra: str) -> dict[str, str]:
    return child_env(*paths) | extra


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "verification", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.fixture
def without_cosmic_ray(tmp_path: Path) -> Path:
    """A directory that, first on PYTHONPATH, makes ``import cosmic_ray`` fail."""
    shadow = tmp_path / "no_cosmic_ray"
    (shadow / "cosmic_ray").mkdir(parents=True)
    (shadow / "cosmic_ray" / "__init__.py").write_text("raise ImportError('not installed')\n")
    return shadow


def test_mutate_without_cosmic_ray_leaves_no_report_directory(tmp_path, without_cosmic_ray):
    report = tmp_path / "deep" / "report"
    done = _cli("mutate", "--device", "sim", "--report", str(report),
                env=_env(without_cosmic_ray))  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "error: mutation testing needs cosmic-ray: pip install 'breakable-cudagraph[mutation]'"
    )
    assert not (tmp_path / "deep").exists()


def test_mutate_with_a_bad_target_leaves_no_report_directory(tmp_path):
    # Without cosmic-ray the run stops at that first (the GPU machine has none).
    pytest.importorskip("cosmic_ray")
    report = tmp_path / "report"
    done = _cli("mutate", "--device", "sim", "--target", "no_such_module_xyz",
                "--report", str(report), env=_env())  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "no_such_module_xyz" in done.stderr
    assert not report.exists()


def test_certify_mutants_without_cosmic_ray_says_so_before_any_work(tmp_path, without_cosmic_ray):
    out = tmp_path / "cert"
    start = time.monotonic()
    done = _cli("certify", "--device", "sim", "--mutants", "2", "--out", str(out),
                env=_env(without_cosmic_ray))  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().startswith("error: mutation testing needs cosmic-ray")
    assert done.stdout == "" and not out.exists()
    # The standard profile's campaign takes minutes; the check comes before it.
    assert time.monotonic() - start < 120


def test_ctrl_c_during_certify_is_one_line_exit_130_and_leaves_nothing(tmp_path):
    (tmp_path / "slow_start_target.py").write_text(SLOW_START_TARGET)
    started, out = tmp_path / "started", tmp_path / "cert"
    child = subprocess.Popen(
        [sys.executable, "-m", "verification", "certify", "--device", "sim",
         "--target", "slow_start_target", "--out", str(out)],
        cwd=ROOT, env=_env(tmp_path, CAMPAIGN_STARTED=str(started)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_sigint_as_from_a_terminal,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not started.exists():
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "the campaign never started"
            time.sleep(0.1)
        child.send_signal(signal.SIGINT)
        stdout, stderr = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130, stderr
    assert _said(stderr) == "interrupted: nothing written", stderr
    assert "Traceback" not in stdout
    assert not out.exists()


# A target whose first capture sends Ctrl-C to its own process from inside a destructor, where
# Python drops the KeyboardInterrupt ("Exception ignored in ..."): the race CI once lost, made
# certain. The command must still end at once, not run its campaign for minutes.
SWALLOWED_CTRL_C_TARGET = """
import os
import signal
import time

import breakable_cudagraph as _library

eager_break_during_capture = _library.eager_break_during_capture


class _SendsCtrlCWhenFreed:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.5)  # the interrupt lands here, inside the destructor, and is dropped


class BreakableCUDAGraphCapture(_library.BreakableCUDAGraphCapture):
    sent = False

    def __init__(self, *args, **kwargs):
        if not BreakableCUDAGraphCapture.sent:
            BreakableCUDAGraphCapture.sent = True
            _SendsCtrlCWhenFreed()  # freed at once
        super().__init__(*args, **kwargs)
"""


def test_ctrl_c_lost_in_a_destructor_still_ends_certify_at_once(tmp_path):
    (tmp_path / "swallowing_target.py").write_text(SWALLOWED_CTRL_C_TARGET)
    out = tmp_path / "cert"
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "verification", "certify", "--device", "sim",
         "--target", "swallowing_target", "--out", str(out)],
        cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=240,
        preexec_fn=_sigint_as_from_a_terminal,
    )  # fmt: skip
    assert done.returncode == 130, done.stderr[-2000:]
    assert _said(done.stderr) == "interrupted: nothing written", done.stderr[-2000:]
    assert not out.exists()
    # The standard profile's fuzz campaign alone takes minutes; the next example ends it.
    assert time.monotonic() - start < 120


def test_an_output_path_that_is_a_file_is_one_line_and_left_alone(tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("mine\n")
    for option, path in (("--report", taken), ("--report", taken / "sub")):
        done = _cli("fuzz", "--device", "sim", "--examples", "1", option, str(path), env=_env())
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
        assert done.stderr.startswith(f"error: --report {path}: "), done.stderr
    assert taken.read_text() == "mine\n"


def test_ctrl_c_during_an_isolated_fuzz_is_one_line_for_both_processes(tmp_path):
    # A terminal's Ctrl-C goes to the whole process group: parent and isolated child.
    (tmp_path / "slow_start_target.py").write_text(SLOW_START_TARGET)
    started = tmp_path / "started"
    child = subprocess.Popen(
        [sys.executable, "-m", "verification", "fuzz", "--device", "sim", "--isolate",
         "--examples", "100000", "--target", "slow_start_target"],
        cwd=ROOT, env=_env(tmp_path, CAMPAIGN_STARTED=str(started)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=_sigint_as_from_a_terminal,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not started.exists():
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "the campaign never started"
            time.sleep(0.1)
        os.killpg(child.pid, signal.SIGINT)
        stdout, stderr = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
    assert child.returncode == 130, stderr
    assert _said(stderr) == "interrupted: nothing written", stderr
    assert "Traceback" not in stdout
