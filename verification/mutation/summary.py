"""Renders a mutation result: one score line, and a Markdown/JSON record of every survivor.

The Markdown table lists each survivor with file, line, operator, the hint, and its diff, so
the committed record can be judged one row at a time.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from verification.mutation.engine import MutationResult


def score_line(result: MutationResult) -> str:
    killed, total = len(result.killed), len(result.mutants)
    return (
        f"mutate: {killed}/{total} mutants killed ({100 * result.score:.1f}%), "
        f"{len(result.survivors)} survived, {result.available} available, "
        f"target={result.target}, device={result.kind}, {result.seconds:.0f} s"
    )


def as_dict(result: MutationResult, command: str) -> dict[str, Any]:
    return {
        "command": command,
        "target": result.target,
        "device": result.kind,
        "stages": result.stages,
        "available": result.available,
        "mutants": len(result.mutants),
        "killed": len(result.killed),
        "score": round(result.score, 4),
        "killed_by": dict(Counter(m.killed_by.split(": ")[-1] for m in result.killed)),
        "seconds": round(result.seconds, 1),
        "results": [
            {
                "file": m.file,
                "line": m.line,
                "operator": m.operator,
                "occurrence": m.occurrence,
                "killed_by": m.killed_by,
                "hint": m.hint,
                "diff": m.diff,
            }
            for m in result.mutants
        ],
    }


def markdown(result: MutationResult, command: str) -> str:
    lines = [f"# Mutation score of `{result.target}`", "", f"`{command}`", "", score_line(result)]
    by_stage = Counter(m.killed_by for m in result.killed)
    lines += ["", "| killed by | mutants |", "| --- | --- |"]
    lines += [f"| {stage} | {count} |" for stage, count in sorted(by_stage.items())]
    lines += ["", "## Survivors", "", "| file:line | operator | hint |", "| --- | --- | --- |"]
    for m in result.survivors:
        lines.append(f"| {m.file}:{m.line} | {m.operator}#{m.occurrence} | {m.hint or ''} |")
    for m in result.survivors:
        lines += ["", f"### {m.label}", "", "```diff", m.diff.rstrip(), "```"]
    return "\n".join(lines) + "\n"


def write(result: MutationResult, out: Path, command: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "mutation.json").write_text(json.dumps(as_dict(result, command), indent=2) + "\n")
    (out / "mutation.md").write_text(markdown(result, command))
