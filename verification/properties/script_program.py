"""A drawn program as a standalone reproducer holds it: torch source, not the harness's data.

A reproducer script copies a property's scenario code unchanged (:mod:`.standalone`). That
code drives a :class:`~verification.programs.Program` through the harness's program
machinery (``make_inputs``, ``step_callables``, ``run_steps``, ``program_tolerance``); the
script gets these stand-ins instead, with the same signatures, over a :class:`ScriptProgram`
built from the functions :func:`verification.report.program_source` writes. Nothing here
imports the harness: the script copies this code as it stands.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ScriptStep:
    """What scenario code reads of a step: whether it runs as an eager break."""

    brk: bool


class ScriptProgram:
    """A program spelled in torch calls: ``define(logged_break)`` makes its function (each
    break step through ``logged_break(step index)``), ``inputs_of(seed)`` its inputs' values.
    ``inputs`` describes each input, ``breaks`` says which steps are breaks, ``tolerance`` is
    the harness's for its ops, and ``one_graph`` is the same program with every break inlined
    (None when a break cannot be)."""

    # Property checks draw programs without host values (``Program.host``).
    host = 0

    def __init__(
        self,
        define: Callable[[Any], Callable[..., list[Any]]],
        inputs_of: Callable[[int], list[Any]],
        inputs: tuple[str, ...],
        breaks: tuple[bool, ...],
        tolerance: Any,
        one_graph: ScriptProgram | None = None,
    ) -> None:
        self.define = define
        self.inputs_of = inputs_of
        self.inputs = inputs
        self.steps = tuple(ScriptStep(brk) for brk in breaks)
        self.tolerance = tolerance
        self.one_graph = one_graph

    @property
    def num_breaks(self) -> int:
        return sum(step.brk for step in self.steps)

    def __repr__(self) -> str:
        return f"<the program of {len(self.steps)} steps above>"


def make_inputs(program: ScriptProgram, seed: int, device: str) -> list[Any]:
    return [x.to(device) for x in program.inputs_of(seed)]


def op_table(ops: Any = None) -> None:
    """The script's ops are its source: no table."""
    return None


def step_callables(program: ScriptProgram, table: Any, decorate: Any, log: Any) -> Any:
    """The program's function, each break step logged, then decorated with ``decorate`` as
    the step's binding defines it (``bound_as``, which the script then defines beside this)."""

    def logged_break(step: Any) -> Any:
        def decorate_step(fn: Any, way: str = "") -> Any:
            if way:
                return globals()["bound_as"](way, decorate, log.wrap(step, fn))
            return decorate(log.wrap(step, fn))

        return decorate_step

    return program.define(logged_break)


def run_steps(
    program: ScriptProgram,
    table: Any,
    callables: Any,
    inputs: Any,
    hook: Any = None,
    host: Any = None,
) -> list[Any]:
    return callables(*inputs, hook=hook)


def program_tolerance(program: ScriptProgram, table: Any) -> Any:
    return program.tolerance


def one_graph_version(program: ScriptProgram) -> ScriptProgram | None:
    return program.one_graph


@contextlib.contextmanager
def race_detection_on_a_gpu(kind: str) -> Iterator[None]:
    """On a GPU no race detector runs: a race shows in the values, amplified."""
    yield None


def describe(error: BaseException) -> str:
    """The exception as the script prints it: the traceback it raises with names the frame."""
    return repr(error)


def entry_frame(error: BaseException) -> None:
    """The frame of the target an exception passed: a script's traceback names it."""
    return None
