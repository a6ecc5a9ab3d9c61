"""Progress: drawn by rich on a terminal, with the count, the rate and the time left; nothing at
all when output is not a terminal or under ``-q``, so logs and pipes stay clean."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.child_env import child_env
from verification.commands.progress import progress_bar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_not_a_terminal_prints_nothing():
    stream = io.StringIO()
    with progress_bar(stream) as (start, advance):
        start("fuzz", 100)
        for _ in range(25):
            advance(1)
        start("sensitivity", None, "targets")
        advance(1)
    assert stream.getvalue() == ""


def test_quiet_prints_nothing_even_on_a_terminal():
    stream = _Terminal()
    with progress_bar(stream, quiet=True) as (start, advance):
        start("fuzz", 4)
        advance(4)
    assert stream.getvalue() == ""


def test_terminal_draws_a_bar_per_step_with_count_unit_and_rate():
    pytest.importorskip("rich")
    stream = _Terminal()
    with progress_bar(stream) as (start, advance):
        start("fuzz", 4)
        advance(2)
        time.sleep(0.05)  # rich's rate needs two samples apart in time
        advance(2)
        start("sensitivity", 3, "targets")
        advance(3)
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream.getvalue())
    assert "fuzz" in drawn and "4/4 examples" in drawn
    assert "sensitivity" in drawn and "3/3 targets" in drawn
    assert "/s" in drawn


def test_a_piped_fuzz_run_prints_no_progress(tmp_path):
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "verification", "fuzz", "--device", "sim", "--examples", "2"],
        cwd=root, env=child_env(),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # The simulator's first build in a fresh environment says so in one line, and only that.
    rest = [line for line in done.stderr.splitlines() if not line.startswith("building the CUDA")]
    assert rest == [], done.stderr
