"""Issues 8 and 22: the example break ops, and the correct ops using each spec feature of
issue 22, pass 1000 examples of ``fuzz-op`` each, with the op in every program (on the
simulator here; the GPU runs are in results/gpu/). Each takes minutes on two cores: long."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SPECS = [
    "examples.masked_compaction:SPEC",
    "examples.varlen_attention:SPEC",
    "examples.paged_kv_cache:SPEC",
    "examples.dynamic_int8_quant:SPEC",
    "tests.faulty_ops:MASKED_SCATTER",
    "tests.faulty_ops:INOUT_COUNTS",
    "tests.faulty_ops:BOUNDED_GATHER",
    "tests.faulty_ops:UNIQUE_UNPERMUTE",
]


def _fuzz_op(spec: str, examples: int) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "verification", "fuzz-op", spec, "--device", "sim"]
    command += ["--examples", str(examples), "--seed", "1"]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3000)


@pytest.mark.sim
@pytest.mark.long
@pytest.mark.parametrize("spec", SPECS)
def test_example_op_passes_1000_examples_of_fuzz_op(spec):
    done = _fuzz_op(spec, 1000)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"contract of {spec}: kept" in done.stdout
    assert "ran in 1000 of 1000 programs" in done.stdout
    assert "1000 examples, 0 findings" in done.stdout
