"""Breadcrumbs: which scenario and which target call a check's child was in when it died.

The parent names a file (:data:`ENV` for a new interpreter, :func:`lay` in a fork); the child
appends a line as each thread enters and leaves a target call (:func:`calling`) under the
scenario it runs (:func:`scenario`), written straight to the file with no buffer, so a crash
loses none. :func:`open_calls` reads back the calls left open, the place of the crash;
:func:`first_error_line` picks what the crash said out of the child's stderr. A check marks
the construct it exercises (:func:`construct`) as a call of its own, so that a crash names it.
Each thread's open calls are also kept in memory (:func:`open_here`), with the time of the last
enter or leave of any thread (:func:`progress`): what a bound on a call that hangs reads and
names (:mod:`verification.bounds`).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

ENV = "BCG_BREADCRUMBS"
_trail: int | None = None
_scenario = "before any scenario"
_checked_env = False
# Each thread's open calls, outermost first; when any thread last entered or left a call.
_open = threading.local()
_progress = time.monotonic()


def lay(path: str | Path | None) -> None:
    """Appends this process's breadcrumbs to ``path`` from now on (None: lays none)."""
    global _trail, _checked_env
    _checked_env = True
    if _trail is not None:
        os.close(_trail)
        _trail = None
    if path is not None:
        _trail = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)


def _fd() -> int | None:
    if not _checked_env:
        lay(os.environ.get(ENV) or None)
    return _trail


def _clean(text: str) -> str:
    return " ".join(str(text).split())


def _write(event: str, call: str) -> None:
    fd = _fd()
    if fd is not None:
        line = f"{event}\t{_clean(threading.current_thread().name)}\t{_scenario}\t{_clean(call)}\n"
        os.write(fd, line.encode(errors="replace"))  # one write: whole lines, even across threads


@contextlib.contextmanager
def scenario(name: str) -> Iterator[None]:
    """Names the scenario the calls in the block belong to (the check's, for every thread)."""
    global _scenario
    before, _scenario = _scenario, _clean(name)
    try:
        yield
    finally:
        _scenario = before


def _stack() -> list[str]:
    try:
        return _open.calls
    except AttributeError:
        _open.calls = []
        return _open.calls


def _moved() -> None:
    # Any thread's: the main thread waiting on threads that still make calls is not stuck.
    global _progress
    _progress = time.monotonic()


def enter(call: str) -> None:
    """The current thread enters its call ``call`` into the target; pair with :func:`leave`
    in a ``finally`` (:func:`calling` does both, at a generator's cost per call)."""
    _write("enter", call)
    _stack().append(call)
    _moved()


def leave(call: str) -> None:
    """The current thread leaves the call it entered last, ``call``."""
    stack = _stack()
    if stack:
        stack.pop()
    _write("leave", call)
    _moved()


@contextlib.contextmanager
def calling(call: str) -> Iterator[None]:
    """Marks the block as the current thread's call ``call`` into the target."""
    enter(call)
    try:
        yield
    finally:
        leave(call)


def open_here() -> list[str]:
    """The calls the current thread has entered and not left, outermost first."""
    return list(_stack())


def progress() -> float:
    """When (``time.monotonic()``) any thread last entered or left a call."""
    return _progress


# How a construct's breadcrumb begins: the rest names the construct, as a cause names it.
CONSTRUCT = "construct: "


@contextlib.contextmanager
def construct(words: str) -> Iterator[None]:
    """Marks the block as exercising the construct ``words`` (``a nested capture``): a crash
    inside it is blamed on that construct."""
    with calling(CONSTRUCT + words):
        yield


def _open_stacks(path: str | Path) -> dict[str, list[tuple[str, str]]]:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return {}
    stacks: dict[str, list[tuple[str, str]]] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != 4:
            continue  # a line the crash cut short
        event, thread, where, call = parts
        stack = stacks.setdefault(thread, [])
        if event == "enter":
            stack.append((where, call))
        elif stack:
            stack.pop()
    return stacks


def open_constructs(path: str | Path) -> list[str]:
    """The constructs (:func:`construct`) left open when the child died, innermost first."""
    found = [
        call.removeprefix(CONSTRUCT)
        for stack in _open_stacks(path).values()
        for _, call in reversed(stack)
        if call.startswith(CONSTRUCT)
    ]
    return list(dict.fromkeys(found))


def open_calls(path: str | Path) -> list[str]:
    """Per thread, the scenario and the calls (outermost first) it had entered and not left:
    "thread A, scenario S: capture > decorated break f"; the thread deepest in calls first
    (the one inside the target, where a thread waiting on it is only in the check); empty when
    the file has none."""
    stacks = sorted(_open_stacks(path).items(), key=lambda item: -len(item[1]))
    return [
        f"thread {thread}, scenario {stack[-1][0]}: {' > '.join(call for _, call in stack)}"
        for thread, stack in stacks
        if stack
    ]


# Lines of a crash report that say where it happened, not what went wrong.
_WHERE = ("frame #", 'File "', "Thread 0x", "Current thread", "Exception raised from", "Traceback")
# What a dying process says first, most telling first: the message of the C++ exception that
# ended it, a CUDA or cuBLAS error, then the notices of a C++ terminate, an abort or a fault.
_SAYS = (
    ("CUDA error", "CUBLAS", "cuda error", "INTERNAL ASSERT"),
    ("terminate called", "Assertion", "Fatal Python error", "Segmentation fault", "Aborted"),
    ("Error", "error:"),
)


def first_error_line(stderr: str) -> str | None:
    """The first line of what a crashed child said on ``stderr``: a C++ exception's
    ``what()``, else the first line naming a CUDA error, else the first notice of a
    terminate, abort or fault; never a stack frame."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(_WHERE)]
    for line in lines:
        if "what():" in line:
            return line.split("what():", 1)[1].strip()
    for words in _SAYS:
        for line in lines:
            if any(word in line for word in words):
                return line
    return None
