"""The certificate: what was run against which target, where, and the verdict.

``certificate`` turns a finished campaign into a plain dict (JSON-ready) that says whether
the CUDA simulator stood in for a GPU; ``write_certificate`` writes it as
``certificate.json`` and a human-readable ``certificate.md`` into a directory.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import torch

from verification.fuzz import CampaignConfig, CampaignResult
from verification.targets import Target


def certificate(result: CampaignResult, config: CampaignConfig, target: Target) -> dict[str, Any]:
    return {
        "target": target.name,
        "target_version": target.version,
        "device": result.device,
        "simulated": result.device == "sim",
        "torch_version": torch.__version__,
        "gpu": torch.cuda.get_device_name() if result.device == "cuda" else None,
        "examples": result.examples,
        "findings": [f.summary() for f in result.findings],
        "seed": config.seed,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "passed": not result.findings,
    }


def markdown(cert: dict[str, Any]) -> str:
    verdict = "PASS" if cert["passed"] else "FAIL"
    lines = [f"# Certificate for `{cert['target']}`: {verdict}", ""]
    if cert["simulated"]:
        lines += ["**Run on the CUDA simulator, not a real GPU.**", ""]
    lines += [f"- {key}: {value}" for key, value in cert.items() if key != "findings"]
    lines += ["", "## Findings", ""] + ([f"- {f}" for f in cert["findings"]] or ["none"])
    return "\n".join(lines) + "\n"


def write_certificate(cert: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "certificate.json").write_text(json.dumps(cert, indent=2) + "\n")
    (out / "certificate.md").write_text(markdown(cert))
