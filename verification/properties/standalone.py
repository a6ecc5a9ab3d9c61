"""Standalone reproducers for findings of a check's fixed scenarios: the scenario's own code,
copied into the script.

:func:`render` writes a script that imports only torch and the target (and the simulator,
when the finding came from it, as fuzz reproducers do). It copies the scenario function and
every harness function, class and constant its code reaches, binds ``config`` to the target
and the device, and exits 1 while the scenario reports a problem, 0 once it holds.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import sys
import textwrap
import types
from typing import Any

from verification.findings import Finding
from verification.targets import Target

HARNESS = "verification."
# Harness modules a reproducer may not copy from: a scenario that reaches them (the op
# catalog, the simulator's internals) is not a fixed scenario.
NOT_COPIED = ("verification.ops", "verification.sim", "verification.programs")


class NotStandalone(Exception):
    """The scenario reaches harness code a script cannot carry."""


def _names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _assignment(module: types.ModuleType, name: str) -> tuple[str, types.ModuleType] | None:
    """The source of the module-level statement that binds ``name``, and its module (the
    harness module ``module`` imported it from, if it did)."""
    source = inspect.getsource(module)
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(HARNESS):
            if any((alias.asname or alias.name) == name for alias in node.names):
                return _assignment(importlib.import_module(node.module), name)
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            segment = ast.get_source_segment(source, node)
            return None if segment is None else (segment, module)
    return None


class _Bundle:
    def __init__(self) -> None:
        self.imports: set[str] = set()
        self.sources: dict[str, str] = {}  # name -> source, dependencies first
        self.objects: dict[str, Any] = {}

    def add(self, name: str, value: Any, module: types.ModuleType) -> None:
        if name in self.objects:
            if self.objects[name] is not value:
                raise NotStandalone(f"two harness definitions are named {name}")
            return
        self.objects[name] = value
        if inspect.ismodule(value):
            if value.__name__.startswith(HARNESS):
                raise NotStandalone(f"it uses the harness module {value.__name__}")
            alias = "" if value.__name__ == name else f" as {name}"
            self.imports.add(f"import {value.__name__}{alias}")
            return
        home = getattr(value, "__module__", None) if callable(value) else None
        if home is not None and not home.startswith(HARNESS) and home != module.__name__:
            qualname = getattr(value, "__qualname__", name)
            alias = "" if qualname == name else f" as {name}"
            self.imports.add(f"from {home} import {qualname}{alias}")
            return
        if home is not None and home.startswith(NOT_COPIED):
            raise NotStandalone(f"it uses {home}.{name}")
        if inspect.isfunction(value) or inspect.isclass(value):
            source = textwrap.dedent(inspect.getsource(value))
            owner = sys.modules[value.__module__]
        else:  # a constant of this module
            found = _assignment(module, name)
            if found is None:
                raise NotStandalone(f"cannot find where {module.__name__} binds {name}")
            source, owner = found
            if owner.__name__.startswith(NOT_COPIED):
                raise NotStandalone(f"it uses {owner.__name__}.{name}")
        self.walk(source, owner)
        self.sources[name] = source

    def walk(self, source: str, module: types.ModuleType) -> None:
        for name in sorted(_names(compile(source, module.__name__, "exec"))):
            if name in vars(module) and not hasattr(builtins, name):
                self.add(name, vars(module)[name], module)


def render(finding: Finding, target: Target, kind: str, command: str) -> str:
    """The standalone script for a finding of a fixed scenario; raises :class:`NotStandalone`
    when the scenario reaches harness code a script cannot carry."""
    scenario = dict(finding.scenario)
    module_name, _, qualname = str(scenario["fixed"]).partition(":")
    module = importlib.import_module(module_name)
    function = getattr(module, qualname)
    bundle = _Bundle()
    bundle.add(qualname, function, module)
    if not target.import_code:
        raise NotStandalone("the target has no import a script could use")
    simulated = kind == "sim"
    summary = finding.summary().splitlines()[0].replace('"""', "'")
    args = ", ".join(repr(a) for a in scenario.get("args", ())) + (
        ", " if scenario.get("args") else ""
    )
    header = (
        f'"""Reproducer for a {finding.check} {finding.kind} finding in target {target.name} '
        f"({kind}).\n\n{summary}\nCommand: {command}\n"
        "It imports only torch and the target. Exits 1 while the bug is present, 0 once it "
        'is fixed.\n"""\n\nfrom __future__ import annotations\n\n'
    )
    imports = sorted(
        bundle.imports | {"import sys", "import torch", "from types import SimpleNamespace"},
        key=lambda line: (line.startswith("from"), line),
    )
    lines = [header + "\n".join(imports) + "\n", target.import_code + "\n"]
    if simulated:
        lines[-1] += "from verification.sim import simulated_cuda\n"
    lines += [source.strip("\n") + "\n" for source in bundle.sources.values()]
    # The simulator's tensors are cuda tensors too.
    lines.append(
        "def main() -> int:\n"
        "    checked = SimpleNamespace(\n"
        "        module=target,\n"
        "        BreakableCUDAGraphCapture=target.BreakableCUDAGraphCapture,\n"
        "        eager_break_during_capture=target.eager_break_during_capture,\n"
        f"        supports_tensor_returns={target.supports_tensor_returns!r},\n"
        f"        releases_break_arguments={target.releases_break_arguments!r},\n"
        f"        caller_duties={target.caller_duties!r},\n"
        "    )\n"
        f"    config = SimpleNamespace(target=checked, kind={kind!r}, device='cuda', "
        f"seed={finding.seed or 0})\n"
        f"    problem = {qualname}({args}config)\n"
        "    if problem is None:\n"
        f'        print("reproducer passed: property {finding.check} holds")\n'
        "        return 0\n"
        f'    print(f"property {finding.check} violated: {{problem}}", file=sys.stderr)\n'
        "    return 1\n"
    )
    entry = (
        "    with simulated_cuda():\n        sys.exit(main())\n"
        if simulated
        else ("    sys.exit(main())\n")
    )
    lines.append('if __name__ == "__main__":\n' + entry)
    return "\n\n".join(lines)
