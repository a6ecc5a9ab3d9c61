"""The minimal vLLM-contract implementation (``verification/planted/vllm_minimal.py``)
certifies, undeclared (so under the out-buffer contract), with no finding about it, at 2000
examples of up to 16 ops.

On the simulator here; on a GPU the same command runs in bench/gpu_session.sh's certify
phase, with its certificate under results/gpu/.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import verification.properties  # noqa: F401 - registers the property checks' finding kinds
from verification.findings import about_target

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.sim
@pytest.mark.long
def test_minimal_vllm_implementation_certifies_2000_examples_with_no_finding(tmp_path):
    command = [
        sys.executable,
        "-m",
        "verification",
        "certify",
        "--target",
        "verification.planted.vllm_minimal",
    ]
    command += ["--device", "sim", "--examples", "2000", "--max-ops", "16"]
    command += ["--no-sensitivity", "--out", str(tmp_path)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    certificate = tmp_path / "certificate.json"
    assert certificate.exists(), done.stderr[-2000:]
    cert = json.loads(certificate.read_text())
    findings = [f for c in cert["checks"] for f in c["findings"] if about_target(f["kind"])]
    assert done.returncode == 0 and cert["passed"] and not findings, findings
    assert cert["contract"]["name"] == "out-buffer" and cert["settings"]["examples"] == 2000
