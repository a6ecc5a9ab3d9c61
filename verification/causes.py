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
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

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


# Code of the harness's own that only hands a call on (the wrappers that log a break's calls
# around the program's op): a call the target makes with arguments the op does not take
# raises its TypeError in the wrapper's frame, and the bug is the target's, not the wrapper's.
_FORWARDERS: set[types.CodeType] = set()

Forwarder = TypeVar("Forwarder", bound=Callable[..., Any])


def forwarder(fn: Forwarder) -> Forwarder:
    """Marks ``fn`` as a harness function that only hands its call on: an exception raised in
    its frame is blamed on whoever called it."""
    _FORWARDERS.add(fn.__code__)
    return fn


def _frames(error: BaseException) -> list[tuple[Path, int, str]]:
    frames = []
    tb = error.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code not in _FORWARDERS:
            frames.append((Path(code.co_filename).resolve(), tb.tb_lineno, code.co_name))
        tb = tb.tb_next
    return frames


def _frames_under_test(error: BaseException) -> list[Frame]:
    """The frames ``error`` passed in the code under test, outermost first."""
    frames = []
    for path, line, function in _frames(error):
        # "<break op ...>": an op's source the harness compiled, the program's, not the target's.
        generated = path.name.startswith("<") and path.name != "<stdin>"
        if not _passes_on(path) and not _in_harness(path) and not generated:
            frames.append(Frame(_shown(path), line, function))
    return frames


def target_frame(error: BaseException) -> Frame | None:
    """The innermost frame ``error`` passed in the code under test, or None when it passed
    none (the checker's own code raised it, or torch's alone)."""
    frames = _frames_under_test(error)
    return frames[-1] if frames else None


def entry_frame(error: BaseException) -> Frame | None:
    """The outermost frame ``error`` passed in the code under test: the entry point the caller
    called (``__enter__``, ``__exit__``, ``replay``), where cleanup after a failure belongs."""
    frames = _frames_under_test(error)
    return frames[0] if frames else None


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


# One bug in the words of the different checks and places that reach it, as data: each
# pattern rewrites what only says where or how the bug was reached (a fault's point, the
# place of a nested capture, a check's own wording of an argument that changed type) into
# words that say which bug it is. A frame the message names stays: it tells two code paths
# apart. Findings whose messages rewrite to the same words (numbers masked) are one cause.
def _calls_words(called: str, expected: str) -> str:
    """What a replay did to the breaks, from the steps it called and those it should have."""
    calls = [int(n) for n in re.findall(r"\d+", called)]
    wanted = [int(n) for n in re.findall(r"\d+", expected)]
    more = any(calls.count(s) > wanted.count(s) for s in set(calls))
    fewer = any(calls.count(s) < wanted.count(s) for s in set(wanted))
    if more and fewer:
        return "a replay ran other breaks in place of those the capture recorded"
    if more:
        return "a replay ran a break more often than the capture recorded it"
    if fewer:
        return "a replay left out a break the capture recorded"
    return "a replay ran the breaks in another order than the capture recorded"


CAUSE_WORDS: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    # The faults check: a fault at capture-begin and one at the pool handle that went through
    # the same function of the target and left the same state are one missing cleanup.
    (re.compile(r"a fault at [\w-]+ #\d+(?: \([\w.]+\))?"), "a fault"),
    # A capture that refused to close after a break's error was caught is a fault at exit, and
    # a capture_begin torch refused (a pool left recording) a fault at capture-begin.
    (re.compile(r"a capture refused to close|a capture_begin torch refused"), "a fault"),
    # The nested check: a target that does not refuse a nested capture lets it through (or
    # leaves torch to refuse it) wherever the nested capture is opened.
    (
        re.compile(
            r"^a nested capture \([\w-]+, before step \d+\) was "
            r"(?:let through|refused only by torch's capture_begin)[^\n]*"
        ),
        "a nested capture was not refused by the target",
    ),
    # The fuzzer's and the pool check's words for a break handed another type at replay.
    (
        re.compile(
            r"^(?:[^\n]*?: )?[^\n]+? given to a break reached it at replay as "
            r"(?P<got>[^\n]+?), not as (?P<given>[^\n]+)$"
        ),
        r"a break was handed at replay \g<got>, not \g<given>",
    ),
    # Breaks a replay ran other than the capture recorded, in any check's words and whatever
    # the program: which of them is the bug's kind (run again, left out, replaced, reordered).
    (
        re.compile(
            r"^[^\n]*?(?:replay called break steps|break steps called(?: in order)?) "
            r"\[(?P<called>[\d, ]*)\], expected (?:each of )?\[(?P<expected>[\d, ]*)\][^\n]*"
        ),
        lambda match: _calls_words(match["called"], match["expected"]),
    ),
    # A stream left capturing, as the faults check finds it or as another check trips over it.
    (
        re.compile(
            r"^[^\n]*?(?:the caller's stream is (?:still|left) capturing|left the caller's "
            r"stream capturing|the stream the capture ran on is still capturing)[^\n]*"
        ),
        "a capture leaves a stream capturing",
    ),
    # The threads check's scenarios, each of which may first see it: another thread is shown
    # the capture this thread has open.
    (
        re.compile(r"^[^\n]*?current\(\) in another thread returned thread A's open capture[^\n]*"),
        "another thread is shown the capture this thread has open",
    ),
    (
        re.compile(r"^[^\n]*?ran \d+ times in one replay, expected once[^\n]*"),
        "a replay ran a break more often than the capture recorded it",
    ),
    # What breaks is a namedtuple being one, whatever the program named its class.
    (re.compile(r"namedtuple \w+"), "namedtuple"),
)


def cause_words(message: str) -> str | None:
    """``message``'s first line in the words of its cause (:data:`CAUSE_WORDS`), or None when
    no pattern applies."""
    first = message.splitlines()[0] if message else ""
    words = first
    for pattern, replacement in CAUSE_WORDS:
        words = pattern.sub(replacement, words)
    return None if words == first else words
