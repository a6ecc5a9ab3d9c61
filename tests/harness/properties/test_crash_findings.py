"""A check's child that dies is reported with where it was and what it said: the scenario and
the target call each thread was in (the child's breadcrumbs), the signal, and the first line
of the C++ or CUDA error it printed, never the last frame of its stack."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path

from tests.child_env import child_env
from verification import breadcrumbs
from verification.breadcrumbs import first_error_line, open_calls
from verification.planted.aborting import CPP_ERROR

ROOT = Path(__file__).resolve().parents[3]


def test_a_check_that_aborts_inside_a_break_names_scenario_call_signal_and_message(
    bcg_kind, tmp_path
):
    module = tmp_path / "planted_aborting.py"
    module.write_text(
        "from verification.planted.aborting import build\n"
        "globals().update({k: v for k, v in vars(build()).items() if k != '__name__'})\n"
    )
    argv = ["check", "threads", "--target", module.stem, "--device", bcg_kind, "--isolate"]
    done = subprocess.run(
        [sys.executable, "-m", "verification", *argv, "--examples", "2"],
        cwd=ROOT, env=child_env(tmp_path), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("FINDING ")]
    assert "died by signal SIGABRT" in line, line
    # The thread whose capture broke: a drawn example's lifetime captures in X first.
    assert re.search(r"in thread [AXY], scenario threads drawn example", line), line
    assert "the capture of the program > decorated break" in line, line
    assert line.endswith("it said: CUDA error: an illegal memory access was encountered"), line


def test_the_error_line_is_the_cpp_exceptions_message_not_a_stack_frame():
    err = "some progress\n" + CPP_ERROR
    assert first_error_line(err) == "CUDA error: an illegal memory access was encountered"


def test_without_a_cpp_message_the_error_line_is_the_fatal_notice():
    err = (
        "Fatal Python error: Segmentation fault\n\nThread 0x00007f (most recent call first):\n"
        '  File "x.py", line 3 in f\n'
    )
    assert first_error_line(err) == "Fatal Python error: Segmentation fault"
    assert first_error_line('  File "x.py", line 3 in f\nframe #3: g + 0x1\n') is None


def test_the_open_calls_are_those_entered_and_not_left_in_each_thread(tmp_path):
    trail = tmp_path / "trail"
    breadcrumbs.lay(trail)
    held = []  # calls never left, as in a process that died in them (kept from the collector)
    try:
        with breadcrumbs.scenario("threads foreign_add_eager_problem"):
            with breadcrumbs.calling("replay()"):
                pass  # left: not where it died
            held.append(breadcrumbs.calling("a capture"))
            held[-1].__enter__()

            def other() -> None:
                held.append(breadcrumbs.calling("add_eager"))
                held[-1].__enter__()

            thread = threading.Thread(target=other, name="B")
            thread.start()
            thread.join()
        with trail.open("a") as cut:
            cut.write("enter\tC\tcut sh")  # the crash cut the last line short
    finally:
        breadcrumbs.lay(None)
    assert open_calls(trail) == [
        f"thread {threading.current_thread().name}, scenario threads foreign_add_eager_problem: "
        "a capture",
        "thread B, scenario threads foreign_add_eager_problem: add_eager",
    ]


def test_a_child_interpreter_that_dies_leaves_its_breadcrumbs_to_the_finding(monkeypatch):
    # The GPU's isolation (a new interpreter per check), with a child that dies at once.
    from verification import isolation
    from verification.properties import processes

    script = (
        "import os\nfrom verification import breadcrumbs\n"
        "with breadcrumbs.scenario('threads drawn example 3'):\n"
        "    held = breadcrumbs.calling('replay()')\n"
        "    held.__enter__()\n"
        "    os.write(2, b'RuntimeError: CUBLAS_STATUS_EXECUTION_FAILED\\nframe #9: x\\n')\n"
        "    os.abort()\n"
    )

    def run_child(argv, capture_stderr=False, breadcrumbs=None):
        done = isolation.subprocess.run(
            [sys.executable, "-c", script],
            env=child_env(base={**isolation.os.environ, isolation.ENV: str(breadcrumbs)}),
            stderr=subprocess.PIPE,
            text=True,
        )
        return isolation.ChildRun(done.returncode, done.stderr)

    monkeypatch.setattr(processes, "run_child", run_child)
    result = processes.run_in_child("threads", ["check", "threads", "--device", "cuda"])
    (finding,) = result.findings
    assert finding.message == (
        "crash: the check's process died by signal SIGABRT in thread MainThread, scenario "
        "threads drawn example 3: replay(); it said: RuntimeError: "
        "CUBLAS_STATUS_EXECUTION_FAILED"
    )
