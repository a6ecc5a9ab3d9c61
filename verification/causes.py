"""Where an exception came from: the innermost frame of the code under test that it passed.

:func:`describe` spells an exception as its type and message followed by that frame,
``AssertionError('x') [at vllm/compilation/breakable_cudagraph.py:201, in capture_begin]``,
and :func:`raised_in` reads the frame back out of a finding's message, so that the frame
survives every way a finding travels (a check's problem string, a child's JSON). Frames of
torch, the standard library, hypothesis and the simulator only pass an error on; frames of the
harness are the checker's own, except the planted targets and the adapters, which stand for
the code under test. :func:`raised_by_harness` says whether the checker itself raised.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

_HARNESS = Path(__file__).resolve().parent
# Code under test that lives inside the harness: planted bugs and the peers' adapters.
_UNDER_TEST_IN_HARNESS = (_HARNESS / "planted", _HARNESS / "targets")
# The harness's own, beside the adapters: the loader and the break contracts.
_HARNESS_IN_TARGETS = (_HARNESS / "targets" / "__init__.py", _HARNESS / "targets" / "contracts.py")
_STDLIB = Path(contextlib.__file__).resolve().parent
_INSTALLED = ("site-packages", "dist-packages")


def _passes_on(path: Path) -> bool:
    """Whether a frame in ``path`` only passes an error on: torch, hypothesis, the simulator,
    the standard library (an installed package under it is code of its own)."""
    parts = path.parts
    for name in ("torch", "hypothesis", "_hypothesis_globals"):
        for marker in _INSTALLED:
            if marker in parts:
                at = parts.index(marker)
                if len(parts) > at + 1 and parts[at + 1] == name:
                    return True
    if _HARNESS / "sim" in path.parents:
        return True
    return _STDLIB in path.parents and not any(m in parts for m in _INSTALLED)


def _in_harness(path: Path) -> bool:
    if _HARNESS not in path.parents or path in _HARNESS_IN_TARGETS:
        return _HARNESS in path.parents
    return not any(p in path.parents for p in _UNDER_TEST_IN_HARNESS)


@dataclass(frozen=True)
class Frame:
    """One frame: its file as a reader finds it (relative to the installed packages or the
    working directory where it lies under them), its line and its function."""

    path: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}, in {self.function}"


def _shown(path: Path) -> str:
    parts = path.parts
    for marker in _INSTALLED:
        if marker in parts:
            return "/".join(parts[parts.index(marker) + 1 :])
    with contextlib.suppress(ValueError):
        return str(path.relative_to(Path(os.getcwd()).resolve()))
    return str(path)


def _frames(error: BaseException) -> list[tuple[Path, int, str]]:
    frames = []
    tb = error.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        frames.append((Path(code.co_filename).resolve(), tb.tb_lineno, code.co_name))
        tb = tb.tb_next
    return frames


def target_frame(error: BaseException) -> Frame | None:
    """The innermost frame ``error`` passed in the code under test, or None when it passed
    none (the checker's own code raised it, or torch's alone)."""
    found = None
    for path, line, function in _frames(error):
        # "<break op ...>": an op's source the harness compiled, the program's, not the target's.
        generated = path.name.startswith("<") and path.name != "<stdin>"
        if not _passes_on(path) and not _in_harness(path) and not generated:
            found = Frame(_shown(path), line, function)
    return found


def raised_by_harness(error: BaseException) -> bool:
    """Whether the innermost frame of ``error`` that only passes nothing on lies in the
    checker's own code (not a planted target's or an adapter's)."""
    innermost = None
    for path, _, _ in _frames(error):
        if not _passes_on(path):
            innermost = path
    return innermost is not None and _in_harness(innermost)


def describe(error: BaseException) -> str:
    """``repr(error)`` and, where it passed code under test, that frame:
    ``AssertionError() [at pkg/mod.py:12, in fn]``."""
    frame = target_frame(error)
    text = repr(error)
    if len(text) > 400:  # a message that quotes a whole tensor or traceback
        text = f"{type(error).__name__}({str(error)[:300]!r}...)"
    return text if frame is None else f"{text} [at {frame}]"


@dataclass(frozen=True)
class Raised:
    """An exception as a finding's message names it: its type and the frame it came from."""

    exception: str
    frame: Frame


# ``Type(...)`` with parentheses nested at most once inside, then the frame: a word before
# an earlier parenthesis in the message ("foo(bar) raised ...") cannot pass for the type.
_RAISED = re.compile(
    r"(?P<exception>[A-Za-z_][\w.]*)\((?:[^()\n]|\([^()\n]*\))*\) "
    r"\[at (?P<path>[^\]\n]+?):(?P<line>\d+), in (?P<function>[^\]\n]+)\]"
)


def raised_in(message: str) -> Raised | None:
    """The first exception with a frame that ``message`` names (as :func:`describe` spells
    it), or None."""
    match = _RAISED.search(message)
    if match is None:
        return None
    frame = Frame(match["path"], int(match["line"]), match["function"])
    return Raised(match["exception"], frame)
