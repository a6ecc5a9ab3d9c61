"""Issue 8: the two example break ops pass 1000 examples of ``fuzz-op`` each, with the op
in every program (on the simulator here; the GPU run is in results/gpu/2026-11-30b.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.sim
@pytest.mark.long
@pytest.mark.parametrize(
    "spec", ["examples.masked_compaction:SPEC", "examples.varlen_attention:SPEC"]
)
def test_example_op_passes_1000_examples_of_fuzz_op(spec):
    command = [sys.executable, "-m", "verification", "fuzz-op", spec, "--device", "sim"]
    command += ["--examples", "1000", "--seed", "1"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"contract of {spec}: kept" in done.stdout
    assert "ran in 1000 of 1000 programs" in done.stdout
    assert "1000 examples, 0 findings" in done.stdout
