"""Standalone reproducers for property findings: the check's own code, copied into the script.

:func:`render` (a fixed scenario's finding) and :func:`render_program` (a drawn program's)
write a script that imports only torch and the target (and the simulator, when the finding
came from it, as fuzz reproducers do). It copies the scenario function (for a drawn program,
the property's ``example``) and every harness function, class and constant its code reaches,
binds ``config`` to the target and the device, and exits 1 while the scenario reports a
problem, 0 once it holds. A drawn program is spelled in torch calls by
:func:`verification.report.program_source`; the harness's program machinery is replaced by
the stand-ins of :mod:`.script_program`, which run that source.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import math
import re
import sys
import textwrap
import types
from collections.abc import Sequence
from typing import Any

from verification import bounds, breadcrumbs, causes, divergence, execute, oracle, programs
from verification.findings import Finding
from verification.ops import ambient
from verification.programs import Program, input_expr
from verification.properties import pool, runner, runs, script_program, stream_order
from verification.report import program_source
from verification.targets import CAPTURE_SET, Target

HARNESS = "verification."
# Harness modules a reproducer may not copy from: a scenario that reaches them (the op
# catalog, the simulator's internals) is not a fixed scenario.
NOT_COPIED = ("verification.ops", "verification.sim", "verification.programs")


# The repetition property's cycles, as a reproducer runs them (``reproduce``'s default).
CYCLES = 100


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


def _renamed(source: str, old: str, new: str) -> str:
    """``source`` defining ``new`` where it defined ``old`` (a harness function imported
    under another name, or a stand-in bound to the harness's name)."""
    if old == new:
        return source
    pattern = rf"^((?:async\s+)?(?:def|class)\s+){re.escape(old)}\b"
    return re.sub(pattern, rf"\g<1>{new}", source, count=1, flags=re.M)


# Values a script may spell as literals wherever they live (a message the simulator shares).
_LITERAL = (str, int, float, bool, type(None))


class _Bundle:
    """``stand_ins``: (harness object, what the script has in its place): an object whose
    source is copied under the harness's name, or source text that binds that name."""

    def __init__(self, stand_ins: Sequence[tuple[Any, Any]] = ()) -> None:
        self.imports: set[str] = set()
        self.sources: dict[str, str] = {}  # name -> source, dependencies first
        self.objects: dict[str, Any] = {}
        self.stand_ins = stand_ins

    def add(self, name: str, value: Any, module: types.ModuleType) -> None:
        if name in self.objects:
            if self.objects[name] is not value:
                raise NotStandalone(f"two harness definitions are named {name}")
            return
        self.objects[name] = value
        for harness, stand_in in self.stand_ins:
            if value is harness:
                if isinstance(stand_in, str):
                    self.walk(stand_in, module)
                    self.sources[name] = stand_in
                else:
                    source = textwrap.dedent(inspect.getsource(stand_in))
                    # Its own name there is the stand-in itself, bound here as ``name``.
                    self.walk(
                        source, sys.modules[stand_in.__module__], frozenset({stand_in.__name__})
                    )
                    self.sources[name] = _renamed(source, stand_in.__name__, name)
                return
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
            source = _renamed(textwrap.dedent(inspect.getsource(value)), value.__name__, name)
            owner = sys.modules[value.__module__]
        else:  # a constant of this module
            found = _assignment(module, name)
            if found is None:
                raise NotStandalone(f"cannot find where {module.__name__} binds {name}")
            source, owner = found
            if owner.__name__.startswith(NOT_COPIED):
                if not isinstance(value, _LITERAL):
                    raise NotStandalone(f"it uses {owner.__name__}.{name}")
                source = f"{name} = {value!r}"
        self.walk(source, owner)
        self.sources[name] = source

    def walk(
        self, source: str, module: types.ModuleType, skip: frozenset[str] = frozenset()
    ) -> None:
        for name in sorted(_names(compile(source, module.__name__, "exec")) - skip):
            if name in vars(module) and not hasattr(builtins, name):
                self.add(name, vars(module)[name], module)


# Every script's stand-in for the harness's frame finder: a script names no target frame.
_DESCRIBE = (causes.describe, script_program.describe)
_TARGET_FRAME = (causes.entry_frame, script_program.entry_frame)
# A script lays no breadcrumbs: its crash is the user's to read where it happens.
_BREADCRUMBS = (
    breadcrumbs,
    "class breadcrumbs:\n"
    "    @staticmethod\n"
    "    def calling(call):\n"
    "        import contextlib\n"
    "        return contextlib.nullcontext()\n"
    "\n"
    "    scenario = calling\n"
    "    construct = calling\n"
    "\n"
    "    @staticmethod\n"
    "    def enter(call):\n"
    "        pass\n"
    "\n"
    "    leave = enter\n",
)
# A script's bound on a call (HANG_S, :func:`_script`): faulthandler's watchdog, restarted
# by each bounded call; a call that never returns ends the script with every thread's stack.
_BOUNDS = (
    bounds,
    "class bounds:\n"
    "    @staticmethod\n"
    "    def bounded(what):\n"
    "        import contextlib\n"
    "\n"
    "        if HANG_S is not None:\n"
    "            faulthandler.dump_traceback_later(HANG_S, exit=True)\n"
    "        return contextlib.nullcontext()\n"
    "\n"
    "    class Hang(BaseException):\n"
    "        pass\n",
)
# A script reports a problem in words; the causes findings are merged by stay behind.
_CAUSES = [
    (
        causes.Problem,
        "class Problem(str):\n"
        "    def __new__(cls, text, cause=None):\n"
        "        return str.__new__(cls, text)\n"
        "\n"
        "    def prefixed(self, words):\n"
        "        return Problem(words + str(self))\n",
    ),
    (causes.Cause, "def Cause(*args, **kwargs):\n    return None\n"),
    (causes.raised_cause, "def raised_cause(*args, **kwargs):\n    return None\n"),
    (divergence.calls_cause, "def calls_cause(*args):\n    return None\n"),
    (divergence.handed_cause, "def handed_cause(*args):\n    return None\n"),
    (divergence.AMBIENT, "AMBIENT = None"),
    (divergence.TENSOR_REBUILT, "TENSOR_REBUILT = None"),
    (runs.replay_parting, "def replay_parting(*args):\n    return None\n"),
]


def render(finding: Finding, target: Target, kind: str, command: str) -> str:
    """The standalone script for a finding of a fixed scenario; raises :class:`NotStandalone`
    when the scenario reaches harness code a script cannot carry."""
    scenario = dict(finding.scenario)
    module_name, _, qualname = str(scenario["fixed"]).partition(":")
    module = importlib.import_module(module_name)
    bundle = _Bundle([_DESCRIBE, _TARGET_FRAME, _BREADCRUMBS, _BOUNDS, *_CAUSES])
    bundle.add(qualname, getattr(module, qualname), module)
    args = ", ".join(repr(a) for a in scenario.get("args", ())) + (
        ", " if scenario.get("args") else ""
    )
    return _script(finding, target, kind, command, bundle, f"{qualname}({args}config)")


def _stand_ins(finding: Finding, kind: str) -> list[tuple[Any, Any]]:
    """What a drawn program's script has in place of the harness's program machinery."""
    program = finding.program
    stand_ins: list[tuple[Any, Any]] = [
        _DESCRIBE,
        _TARGET_FRAME,
        _BREADCRUMBS,
        _BOUNDS,
        *_CAUSES,
        (programs.make_inputs, script_program.make_inputs),
        (programs.op_table, script_program.op_table),
        (execute.step_callables, script_program.step_callables),
        (execute.run_steps, script_program.run_steps),
        (oracle.program_tolerance, script_program.program_tolerance),
        (pool._one_graph_version, script_program.one_graph_version),
        (runner.OPS, "OPS = None"),  # the program's ops are its source
        # What a break can read of its state: the text the harness itself runs.
        (ambient.ambient_seen, ambient.AMBIENT_SOURCE.strip("\n")),
        (ambient.seen_difference, ambient.seen_difference),  # plain Python: itself
        # The pool property's example knows its fixed witnesses by these names.
        (pool.WITNESS, f"WITNESS = {'PROGRAM' if program == pool.WITNESS else 'None'}"),
        (
            pool.ARGUMENT_WITNESS,
            f"ARGUMENT_WITNESS = {'PROGRAM' if program == pool.ARGUMENT_WITNESS else 'None'}",
        ),
    ]
    if kind == "cuda":
        stand_ins.append((stream_order.race_detection, script_program.race_detection_on_a_gpu))
    return stand_ins


def _script_program(program: Program, name: str, one_graph: str = "None") -> str:
    """``ScriptProgram(...)`` of ``program`` as the functions ``program_source`` wrote."""
    table = programs.op_table()
    return (
        f"ScriptProgram(\n    define_{name},\n    {name}_inputs,\n"
        f"    inputs={tuple(input_expr(meta) for meta in program.inputs)!r},\n"
        f"    breaks={tuple(step.brk for step in program.steps)!r},\n"
        f"    tolerance={oracle.program_tolerance(program, table)!r},\n"
        f"    one_graph={one_graph},\n)"
    )


def render_program(finding: Finding, target: Target, kind: str, command: str) -> str:
    """The standalone script for a finding on a drawn program: the program as torch source,
    the property's ``example`` for it copied with what it reaches; raises
    :class:`NotStandalone` when that reaches harness code a script cannot carry."""
    from verification.properties import PROPERTIES

    program = finding.program
    assert program is not None, "a drawn program's finding has its program"
    example = PROPERTIES[finding.check].example
    bundle = _Bundle(_stand_ins(finding, kind))
    bundle.add("ScriptProgram", script_program.ScriptProgram, script_program)
    bundle.add("Tolerance", oracle.Tolerance, oracle)
    texts = [program_source(program, "program")]
    one_graph = "None"
    # Only the pool property compares with the program captured as one graph.
    flat = pool._one_graph_version(program) if finding.check == pool.NAME else None
    if flat is not None:
        texts.append(program_source(flat, "one_graph"))
        one_graph = _script_program(flat, "one_graph").replace("\n", "\n    ")
    texts.append(f"PROGRAM = {_script_program(program, 'program', one_graph)}")
    texts.append(f"SCENARIO = {dict(finding.scenario)!r}")
    bundle.sources["PROGRAM"] = "\n\n".join(text.strip("\n") + "\n" for text in texts)
    bundle.add("example", example, sys.modules[example.__module__])
    return _script(finding, target, kind, command, bundle, "example(PROGRAM, SCENARIO, config)")


def _script(
    finding: Finding, target: Target, kind: str, command: str, bundle: _Bundle, call: str
) -> str:
    if not target.import_code:
        raise NotStandalone("the target has no import a script could use")
    simulated = kind == "sim"
    summary = finding.summary().splitlines()[0].replace('"""', "'")
    header = (
        f'"""Reproducer for a {finding.check} {finding.kind} finding in target {target.name} '
        f"({kind}).\n\n{summary}\nCommand: {command}\n"
        "It imports only torch and the target. Exits 1 while the bug is present, 0 once it "
        'is fixed.\n"""\n\nfrom __future__ import annotations\n\n'
    )
    imports = sorted(
        bundle.imports
        | {
            "import faulthandler",
            "import sys",
            "import torch",
            "from types import SimpleNamespace",
        },
        key=lambda line: (line.startswith("from"), line),
    )
    lines = [header + "\n".join(imports) + "\n", target.import_code + "\n"]
    # The harness's bound on one call into the target, which the script keeps (bounds).
    hang_s = bounds.current() if math.isfinite(bounds.current()) else None
    lines.append(f"HANG_S = {hang_s!r}\n")
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
        f"        capture_set=getattr(target, {CAPTURE_SET!r}, None),\n"
        f"        supports_tensor_returns={target.supports_tensor_returns!r},\n"
        f"        releases_break_arguments={target.releases_break_arguments!r},\n"
        f"        caller_duties={target.caller_duties!r},\n"
        "    )\n"
        f"    config = SimpleNamespace(target=checked, kind={kind!r}, device='cuda', "
        f"seed={finding.seed or 0}, cycles={CYCLES})\n"
        f"    problem = {call}\n"
        "    if problem is None:\n"
        f'        print("reproducer passed: property {finding.check} holds")\n'
        "        return 0\n"
        f'    print(f"property {finding.check} violated: {{problem}}", file=sys.stderr)\n'
        "    return 1\n"
    )
    entry = (
        "    if HANG_S is not None:  # a call that never returns: every stack, and exit 1\n"
        "        faulthandler.dump_traceback_later(HANG_S, exit=True)\n"
    ) + (
        "    with simulated_cuda():\n        sys.exit(main())\n"
        if simulated
        else ("    sys.exit(main())\n")
    )
    lines.append('if __name__ == "__main__":\n' + entry)
    return "\n\n".join(lines)
