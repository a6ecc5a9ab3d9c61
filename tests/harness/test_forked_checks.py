"""The simulator's per-check isolation forks this process: a forked check must not hang on
the CPU thread pool the parent already used (fuzz runs parallel CPU ops before certify forks
its property checks; a child's next parallel op then waited forever)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import torch
from verification.properties import processes
from verification.properties.base import CheckResult

torch.set_num_threads(2)
torch.randn(512, 512) @ torch.randn(512, 512)  # the parent's pool of CPU threads exists now

def parallel_op_in_the_child(name, target, kind, examples, seed, cycles, resume=None, **budget):
    torch.randn(512, 512) @ torch.randn(512, 512)
    return [CheckResult(name, 1, 0.0, [])]

processes.run_properties = parallel_op_in_the_child
(result,) = processes.run_forked(["pool"], "unused", "sim", 1)
print("child finished", result.examples)
"""


def test_a_forked_check_survives_the_parents_cpu_thread_pool():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "child finished 1" in done.stdout
