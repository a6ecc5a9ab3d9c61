"""Hints that a surviving mutant may be equivalent (or matter only outside behaviour).

A hint is a guess for the person reading the survivors, never a verdict: each rule of
``RULES`` looks at the operator, the mutated line and the enclosing definition, and the first
that matches gives its reason. Survivors without a hint deserve a new test first.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

# (does it apply to (operator, mutated line, definition name)?, the hint)
RULES: tuple[tuple[Callable[[str, str, str], bool], str], ...] = (
    (
        lambda op, line, where: where in ("__repr__", "__str__"),
        "changes only a repr",
    ),
    (
        lambda op, line, where: op == "RemoveDecorator" and "@overload" in line,
        "removes a typing-only @overload; the real definition follows it",
    ),
    (
        lambda op, line, where: line.rstrip().endswith(": ..."),
        "mutates a typing stub (an @overload whose body is ...); stubs never run",
    ),
    (
        lambda op, line, where: "hasattr(" in line and "add_note" in line,
        "a Python-version guard; every supported Python takes one branch only",
    ),
    (
        lambda op, line, where: (
            re.search(r"\bis\b.*\bNone\b|\bNone\b.*\bis\b", line) is not None
            and op.startswith("ReplaceComparisonOperator_Is")
        ),
        "a None test whose other branch may be unreachable with the values callers pass",
    ),
    (
        lambda op, line, where: op == "ExceptionReplacer",
        "changes which unexpected exception types are handled; only errors nothing raises",
    ),
    (
        lambda op, line, where: re.search(r"\bwarn|note|message|raise\b", line) is not None,
        "changes only a warning or an error message",
    ),
    (
        lambda op, line, where: (
            op == "NumberReplacer" and re.search(r"\b(timeout|\d+\s*\*)", line) is not None
        ),
        "changes a limit or a factor, not a result",
    ),
)


def equivalence_hint(operator: str, line: str, spec: Any = None) -> str | None:
    """The first rule's hint for a survivor, or None when nothing suggests equivalence."""
    where = getattr(spec, "definition_name", None) or ""
    for applies, hint in RULES:
        if applies(operator, line, where):
            return hint
    return None
