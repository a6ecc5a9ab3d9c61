"""The shipped examples run and report success (on the GPU if present, else the simulator)."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.child_env import child_env

ROOT = Path(__file__).resolve().parents[2]


def test_quickstart_example_replays_match_eager():
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 replays match eager" in done.stdout


@pytest.mark.parametrize(
    "script, says",
    [
        ("varlen_attention.py", "varlen attention: replay matches eager"),
        ("masked_compaction.py", "masked compaction: replay matches eager"),
    ],
)
def test_break_op_example_replays_match_eager(script, says):
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=child_env(),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert says in done.stdout
