"""The certificate ``certify`` writes: ``certificate.json`` and ``certificate.md``.

:func:`certificate` turns the checks' results into a plain dict
(target and commit, contract, environment, settings, per-check verdicts, coverage,
sensitivity); :func:`markdown` renders it for a pull request, its first line saying
SIMULATED when the CUDA simulator stood in for a GPU. Only target bugs fail a certificate.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import hypothesis
import torch

from verification.certify.run import CertifyRun, CheckResult
from verification.certify.sensitivity import summary_line
from verification.findings import FINDING_KINDS, Finding, about_target, fails_certificate
from verification.targets import Target


def _git_commit(module: Any) -> str | None:
    """The commit of the git checkout the target's files live in, if they live in one."""
    path = getattr(module, "__file__", None)
    if path is None:
        return None
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(path).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _driver() -> str | None:
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout else None


def environment(device: str) -> dict[str, Any]:
    on_gpu = device == "cuda"
    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda if on_gpu else None,
        "driver": _driver() if on_gpu else None,
        "gpu": torch.cuda.get_device_name() if on_gpu else None,
        "hypothesis": hypothesis.__version__,
    }


def _finding(finding: Finding) -> dict[str, Any]:
    # A property's finding is named by its check; a program's by what broke.
    violation = finding.violation if finding.violation is not None else f"property {finding.check}"
    return {
        "kind": finding.kind,
        "violation": violation,
        "message": finding.message,
        "explanation": FINDING_KINDS[finding.kind].meaning,
        "steps": len(finding.program.steps) if finding.program is not None else 0,
        "seed": finding.seed or 0,
    }


def _merge_coverage(results: Sequence[CheckResult]) -> dict[str, dict[str, int]]:
    merged: dict[str, dict[str, int]] = {}
    for result in results:
        for key, counts in result.coverage.items():
            into = merged.setdefault(key, {})
            for name, count in counts.items():
                into[name] = into.get(name, 0) + count
    return {k: dict(sorted(v.items())) for k, v in merged.items()}


def certificate(
    run: CertifyRun,
    results: Sequence[CheckResult],
    profile: str,
) -> dict[str, Any]:
    """The certificate of ``results``; a result with a ``section`` (sensitivity) becomes that
    section, the others rows of ``checks``."""
    target: Target = run.target
    config = run.config
    sections = {r.name: r.section for r in results if r.section is not None}
    results = [r for r in results if r.section is None]
    findings = [f for r in results for f in r.findings]
    return {
        "simulated": run.device == "sim",
        "passed": not any(fails_certificate(f.kind) for f in findings),
        "target": {
            "name": target.name,
            "version": target.version,
            "commit": _git_commit(target.module),
        },
        "contract": {
            "name": target.contract.name,
            "source": "--contract" if config.contract is not None else "declared or default",
            "summary": target.contract.summary,
        },
        "device": run.device,
        "environment": environment(run.device),
        "settings": {
            "profile": profile,
            "seed": config.seed,
            "examples": config.examples,
            "max_ops": config.max_ops,
            "max_breaks": config.max_breaks,
            "replays": config.replays,
        },
        "checks": [
            {
                "name": r.name,
                "examples": r.examples,
                "seconds": round(r.seconds, 2),
                "verdict": r.verdict,
                "findings": [_finding(f) for f in r.findings],
            }
            for r in results
        ],
        "coverage": _merge_coverage(results),
        "sensitivity": sections.get("sensitivity"),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _counts_line(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in counts.items()) or "none"


def markdown(cert: dict[str, Any]) -> str:
    verdict = "PASS" if cert["passed"] else "FAIL"
    target, env, settings = cert["target"], cert["environment"], cert["settings"]
    lines = []
    if cert["simulated"]:
        lines += ["SIMULATED: run on the CUDA simulator, not a real GPU.", ""]
    lines += [
        f"# Certificate for `{target['name']}`: {verdict}",
        "",
        f"- target: `{target['name']}` version {target['version']}, commit {target['commit']}",
        f"- contract: **{cert['contract']['name']}** ({cert['contract']['source']}): "
        f"{cert['contract']['summary']}",
        f"- device: {cert['device']}; GPU {env['gpu']}, driver {env['driver']}, "
        f"CUDA {env['cuda']}, torch {env['torch']}, hypothesis {env['hypothesis']}",
        f"- profile {settings['profile']}: seed {settings['seed']}, examples "
        f"{settings['examples']}, max-ops {settings['max_ops']}, max-breaks "
        f"{settings['max_breaks']}, replays {settings['replays']}",
        f"- date: {cert['date']}",
        "",
        "## Checks",
        "",
        "| check | examples | seconds | verdict |",
        "| --- | --- | --- | --- |",
    ]
    lines += [
        f"| {c['name']} | {c['examples']} | {c['seconds']} | {c['verdict']} |"
        for c in cert["checks"]
    ]
    everything = [(c["name"], f) for c in cert["checks"] for f in c["findings"]]
    for heading, about in (("Findings", True), ("Checker notes (true of every target)", False)):
        listed = [
            f"- {name}: **{f['kind']}** {f['violation']}: {f['message']}\n  - {f['explanation']}"
            for name, f in everything
            if about_target(f["kind"]) is about
        ]
        if about or listed:
            lines += ["", f"## {heading}", ""] + (listed or ["none"])
    lines += ["", "## Coverage", ""]
    lines += [f"- {key}: {_counts_line(counts)}" for key, counts in cert["coverage"].items()]
    sensitivity = cert["sensitivity"]
    lines += ["", "## Sensitivity", ""]
    if sensitivity is None:
        lines.append("not measured (--no-sensitivity)")
    else:
        lines.append(summary_line(sensitivity))
        missed = [name for name, hit in sensitivity["targets"].items() if not hit]
        if missed:
            lines.append(f"missed: {', '.join(missed)}")
    return "\n".join(lines) + "\n"


def write_certificate(cert: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "certificate.json").write_text(json.dumps(cert, indent=2) + "\n")
    (out / "certificate.md").write_text(markdown(cert))
