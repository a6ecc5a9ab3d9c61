"""The certificate ``certify`` writes: ``certificate.json`` and ``certificate.md``.

:func:`certificate` turns the checks' results into plain data (the verdict, the exact command
and total time, the target with its version and commit, the contract and how it was chosen,
the device, the profile with any overrides, a row per check, coverage, sensitivity);
:func:`markdown` renders it so that its heading answers what was run, on what, how and how
strongly, SIMULATED first when the CUDA simulator stood in for a GPU. Only target bugs fail a
certificate. JSON keys are identifiers.
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

from verification.certify.provenance import provenance
from verification.certify.run import CertifyRun, CheckResult
from verification.devices import DeviceKind
from verification.findings import (
    FINDING_KINDS,
    HARNESS_ERROR,
    Finding,
    RootCause,
    about_target,
    fails_certificate,
    root_causes,
)
from verification.properties import PROPERTIES
from verification.targets import Target
from verification.targets.contracts import DECLARATION, LEGACY_DECLARATION


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


def environment(kind: DeviceKind) -> dict[str, Any]:
    on_gpu = kind == "cuda"
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
        "where": finding.where,
    }


def _root_cause(cause: RootCause) -> dict[str, Any]:
    return {
        "check": cause.finding.check,
        **_finding(cause.finding),
        # The cause as a value, and in words: what every check that reached it blames.
        "cause": cause.finding.cause.as_json(),
        "cause_words": cause.finding.cause.words(),
        "seen_through": cause.seen_through,
    }


def _merge_coverage(results: Sequence[CheckResult]) -> dict[str, dict[str, int]]:
    merged: dict[str, dict[str, int]] = {}
    for result in results:
        for key, counts in result.coverage.items():
            into = merged.setdefault(key, {})
            for name, count in counts.items():
                into[name] = into.get(name, 0) + count
    return {k: dict(sorted(v.items())) for k, v in merged.items()}


def profile_label(name: str, overrides: dict[str, int]) -> str:
    """``standard``, or ``standard with overrides --examples 5`` when options changed it."""
    if not overrides:
        return name
    changed = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in overrides.items())
    return f"{name} with overrides {changed}"


def contract_source(run: CertifyRun) -> str:
    """How the contract was chosen: ``--contract``, ``declared`` by the target, or ``default``."""
    if run.config.contract is not None:
        return "--contract"
    module = run.target.module
    declared = any(hasattr(module, n) for n in (DECLARATION, LEGACY_DECLARATION))
    return "declared" if declared else "default"


def _check_row(result: CheckResult) -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": result.name,
        "kind": "property" if result.name in PROPERTIES else result.name,
        "examples": result.examples,
        "seconds": round(result.seconds, 2),
        "verdict": result.verdict,
        "findings": [_finding(f) for f in result.findings],
    }
    if result.cycles is not None:
        row["cycles"] = result.cycles
    if result.budget_s is not None:
        row["budget_seconds"] = round(result.budget_s, 1)
    if result.not_applicable is not None:
        row["not_applicable"] = result.not_applicable
    return row


def certificate(
    run: CertifyRun,
    results: Sequence[CheckResult],
    profile: str,
    *,
    overrides: dict[str, int] | None = None,
    command: str | None = None,
    seconds: float | None = None,
    joins: Sequence[tuple[Finding, Finding]] = (),
) -> dict[str, Any]:
    """The certificate as plain data; a result with a ``section`` (sensitivity) becomes that
    section, the others rows of ``checks``. ``overrides`` are the budget options given on top
    of ``profile``; ``command`` the command line, ``seconds`` the total time; ``joins`` the
    findings that do not persist once another cause is avoided, with that cause's finding
    (:func:`~verification.certify.persist.avoided_joins`)."""
    target: Target = run.target
    config = run.config
    sections = {r.name: r.section for r in results if r.section is not None}
    results = [r for r in results if r.section is None]
    sensitivity = sections.get("sensitivity")
    findings = [f for r in results for f in r.findings]
    failed = any(fails_certificate(f.kind) for f in findings)
    # A harness that failed has judged nothing: no pass, whatever else ran clean.
    broke = any(f.kind == HARNESS_ERROR for f in findings)
    passed = not failed and not broke
    # Each bug once, however many checks reached it.
    causes = root_causes((f for f in findings if f.fails), joins)
    overrides = dict(overrides or {})
    return {
        "verdict": "fail" if failed else "error" if broke else "pass",
        "passed": passed,
        "simulated": run.kind == "sim",
        "command": command,
        "total_seconds": None if seconds is None else round(seconds, 1),
        "target": {
            "name": target.name,
            "version": target.version,
            **provenance(target.module).as_dict(),
        },
        "contract": {
            "name": target.contract.name,
            "source": contract_source(run),
            "summary": target.contract.summary,
        },
        "device": run.kind,
        "environment": environment(run.kind),
        "profile": {
            "name": profile,
            "overrides": overrides,
            "label": profile_label(profile, overrides),
        },
        "settings": {
            "profile": profile_label(profile, overrides),
            "seed": config.seed,
            "examples": config.examples,
            "max_ops": config.max_ops,
            "max_breaks": config.max_breaks,
            "replays": config.replays,
        },
        "checks": [_check_row(r) for r in results],
        "root_causes": [_root_cause(c) for c in causes],
        "coverage": _merge_coverage(results),
        "sensitivity": sensitivity,
        "sensitivity_skipped": None
        if sensitivity is not None
        else "--no-sensitivity (--sensitivity=off) was given",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _counts_line(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in counts.items()) or "none"


_CONTRACT_SOURCES = {
    "--contract": "chosen with --contract",
    "declared": "declared by the target",
    "default": "the default: the target declares none",
}


def _budget(row: dict[str, Any]) -> str:
    if row.get("not_applicable"):
        return "-"
    unit = "mutant" if row["kind"] == "mutation" else "example"
    text = f"{row['examples']} {unit}{'' if row['examples'] == 1 else 's'}"
    text += f", {row['cycles']} cycles each" if "cycles" in row else ""
    return text + (f" in a {row['budget_seconds']:g} s budget" if "budget_seconds" in row else "")


def _sensitivity_row(sensitivity: dict[str, Any]) -> str:
    found, total = sensitivity["found"], sensitivity["total"]
    verdict = "pass" if found == total else f"MISSED {total - found}"
    return (
        f"| sensitivity | {total} planted bugs, each through its check{_when(sensitivity)} | "
        f"{sensitivity['seconds']} | {found} of {total} found: {verdict} |"
    )


def _when(sensitivity: dict[str, Any]) -> str:
    """Where the evidence was cached: when it was measured."""
    if sensitivity.get("source") != "cached":
        return ""
    return f" (cached: measured {sensitivity['measured_at']})"


def markdown(cert: dict[str, Any]) -> str:
    verdict = cert["verdict"].upper()
    target, env = cert["target"], cert["environment"]
    contract, sensitivity = cert["contract"], cert["sensitivity"]
    lines = []
    if cert["simulated"]:
        lines += ["SIMULATED: run on the CUDA simulator, not a real GPU.", ""]
    version = f" {target['version']}" if target["version"] else ""
    lines += [
        f"# Certificate: {verdict} for `{target['name']}`{version}",
        "",
        f"- verdict: **{verdict}**"
        + {
            "pass": ": no check found a bug of the target",
            "fail": ": see Findings",
            "error": ": none; the harness itself failed (see Findings), so nothing is certified",
        }[cert["verdict"]],
        f"- target: `{target['name']}`{version}, commit {target['describe']}",
        f"- contract: **{contract['name']}**, {_CONTRACT_SOURCES[contract['source']]}: "
        f"{contract['summary']}",
        f"- device: {'the CUDA simulator' if cert['simulated'] else 'cuda'}; "
        f"torch {env['torch']}, hypothesis {env['hypothesis']}, Python {env['python']}",
    ]
    if env.get("gpu"):
        lines.append(f"- GPU: {env['gpu']}, driver {env['driver']}, CUDA {env['cuda']}")
    settings = cert["settings"]
    lines += [
        f"- profile: {cert['profile']['label']} (seed {settings['seed']}, examples "
        f"{settings['examples']}, max-ops {settings['max_ops']}, max-breaks "
        f"{settings['max_breaks']}, replays {settings['replays']})",
    ]
    if cert["command"]:
        lines.append(f"- command: `{cert['command']}`")
    if cert["total_seconds"] is not None:
        lines.append(f"- total time: {cert['total_seconds']} s")
    lines.append(f"- date: {cert['date']}")
    if sensitivity is not None:
        lines.append(
            f"- evidence: the checks found {sensitivity['found']} of {sensitivity['total']} "
            f"planted bugs in this environment{_when(sensitivity)} (Sensitivity below)"
        )
    lines += [
        "",
        "## Checks",
        "",
        "| check | budget run | seconds | verdict |",
        "| --- | --- | --- | --- |",
    ]
    for row in cert["checks"]:
        name = f"{row['name']} (property)" if row["kind"] == "property" else row["name"]
        verdict_cell = row["verdict"]
        if row.get("not_applicable"):
            verdict_cell += f": {row['not_applicable']}"
        lines.append(f"| {name} | {_budget(row)} | {row['seconds']} | {verdict_cell} |")
    if sensitivity is not None:
        lines.append(_sensitivity_row(sensitivity))
    causes = cert.get("root_causes", [])
    lines += ["", "## Findings", ""]
    count = len(causes)
    lines.append(
        f"{count} root cause{'' if count == 1 else 's'}: each bug once, with every check "
        "that reached it"
        if count
        else "none"
    )
    for cause in causes:
        also = (
            f"\n  - also seen through: {', '.join(cause['seen_through'][1:])}"
            if len(cause["seen_through"]) > 1
            else ""
        )
        blames = f"\n  - cause: {cause['cause_words']}" if cause.get("cause_words") else ""
        lines.append(
            f"- {cause['check']}: **{cause['kind']}** {cause['violation']}: {cause['message']}"
            f"{blames}{also}\n  - {cause['explanation']}"
        )
    everything = [(c["name"], f) for c in cert["checks"] for f in c["findings"]]
    notes = [(name, f) for name, f in everything if not fails_certificate(f["kind"])]
    for heading, about in (
        ("Notes on the target", True),
        ("Checker notes (never against the target)", False),
    ):
        listed = [
            f"- {name}: **{f['kind']}** {f['violation']}: {f['message']}\n  - {f['explanation']}"
            for name, f in notes
            if about_target(f["kind"]) is about
        ]
        if listed:
            lines += ["", f"## {heading}", "", *listed]
    lines += ["", "## Coverage", ""]
    lines += [f"- {key}: {_counts_line(counts)}" for key, counts in cert["coverage"].items()]
    lines += ["", "## Sensitivity", ""]
    if sensitivity is None:
        lines.append(f"not measured: {cert['sensitivity_skipped']}")
    else:
        lines.append(
            f"planted-bug targets found: {sensitivity['found']} of {sensitivity['total']} "
            f"(same environment{_when(sensitivity)}; fuzz targets up to "
            f"{sensitivity['fuzz_examples_cap']} examples each, stopping at the first finding; "
            "property targets "
            f"{sensitivity['property_examples']} examples and {sensitivity['property_cycles']} "
            "cycles each, through the property that must find them)"
        )
        lines.append("")
        lines += [
            f"- {check}: {counts['found']} of {counts['total']}"
            for check, counts in sensitivity["by_check"].items()
        ]
        missed = [row["name"] for row in sensitivity["targets"] if not row["found"]]
        if missed:
            lines += ["", f"missed: {', '.join(missed)}"]
    return "\n".join(lines) + "\n"


def write_certificate(cert: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "certificate.json").write_text(json.dumps(cert, indent=2) + "\n")
    (out / "certificate.md").write_text(markdown(cert))
