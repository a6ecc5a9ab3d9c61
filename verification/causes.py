"""Where an exception came from, and what a finding blames, as values.

:func:`describe` spells an exception as its type and message followed by the innermost frame
of the code under test it passed, ``AssertionError('x') [at vllm/compilation/
breakable_cudagraph.py:201, in capture_begin]``, and :func:`raised_in` reads the frame back
out of a finding's message. A :class:`Cause` is what a finding blames: a kind of the closed
list :data:`CAUSE_KINDS`, the construct, break or argument involved, and the target frame;
findings are merged by comparing causes, never wording. Frames of torch, the standard library,
hypothesis and the simulator only pass an error on; frames of the harness are the checker's
own, except the planted targets and the adapters, which stand for the code under test.
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
    ``AssertionError() [at pkg/mod.py:12, in fn]``; then the program step it was raised in,
    where the harness noted one (:func:`note_step`)."""
    frame = target_frame(error)
    text = repr(error)
    if len(text) > 400:  # a message that quotes a whole tensor or traceback
        text = f"{type(error).__name__}({str(error)[:300]!r}...)"
    text = text if frame is None else f"{text} [at {frame}]"
    step = getattr(error, _STEP, None)
    return text if step is None else f"{text} (in {step})"


_STEP = "bcg_program_step"


def note_step(error: BaseException, where: str) -> None:
    """Notes on ``error`` the program step it passed, innermost first: a finding then says
    which step raised and how that step was called."""
    if getattr(error, _STEP, None) is None:
        try:
            setattr(error, _STEP, where)
        except AttributeError:  # an exception type with slots
            pass


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


def reentered(error: BaseException) -> bool:
    """Whether ``error`` passed the code under test again after passing a break's own body
    (an op the program runs as a break, compiled by the harness) that the code under test
    had called: a decorated op called a decorated op on the way to the raise."""
    under_test = False
    in_break = False
    for path, _, _ in _frames(error):
        generated = path.name.startswith("<break op")
        if generated and under_test:
            in_break = True
        elif not generated and not _passes_on(path) and not _in_harness(path):
            if in_break:
                return True
            under_test = True
    return False


@dataclass(frozen=True)
class CauseKind:
    """One kind of cause: ``rank`` says how specific an explanation of this kind is (more is
    more specific), ``words`` what it says of the target."""

    name: str
    rank: int
    words: str


# The closed list of what a finding can blame: a new kind is one entry here. Kinds of rank 0
# to 2 say only how the failure showed; the others say what the target did.
CAUSE_KINDS: dict[str, CauseKind] = {
    kind.name: kind
    for kind in (
        CauseKind("other", 0, "a check's own symptom"),
        CauseKind("crash", 1, "the process died"),
        CauseKind("hang", 3, "a call into the target did not return"),
        CauseKind("raised", 2, "the target raised an exception"),
        CauseKind("values", 3, "a replay computed other values than eager"),
        CauseKind("calls", 4, "a replay called the breaks otherwise than the capture recorded"),
        CauseKind("handed-otherwise", 4, "a break was handed other types at replay than given"),
        CauseKind("ambient", 4, "a break ran at replay under other state than its region set"),
        CauseKind("state-left", 4, "a replay left its caller's thread in other state than eager"),
        CauseKind("fault-cleanup", 4, "a fault inside the target left its state behind"),
        CauseKind("stream-capturing", 4, "a capture leaves a stream capturing"),
        CauseKind("kept-alive", 4, "a dropped capture stays alive, its graphs and memory too"),
        CauseKind("thread-shown-capture", 4, "another thread is shown this thread's capture"),
        CauseKind(
            "capture-time-copy",
            5,
            "a break received at replay the copy of an argument made at capture, not the "
            "caller's object",
        ),
        CauseKind("nested-op", 5, "a decorated op called a decorated op"),
        CauseKind("nested-capture", 5, "a nested capture was not refused by the target"),
    )
}


@dataclass(frozen=True)
class Cause:
    """What a finding blames, as a value: a kind of :data:`CAUSE_KINDS`, the construct, break
    or argument involved (words without numbers or program names, so that two programs that
    reach one bug agree), and the frame of the target with the exception raised there.

    Two findings are one cause when they share a key (:meth:`keys`): the same exception from
    the same frame, or the same construct involved, whatever words their checks chose."""

    kind: str
    involves: str = ""
    frame: Frame | None = None
    exception: str = ""

    def __post_init__(self) -> None:
        if self.kind not in CAUSE_KINDS:
            raise ValueError(f"unknown cause kind {self.kind!r}; known: {', '.join(CAUSE_KINDS)}")

    @property
    def rank(self) -> tuple[int, bool, bool]:
        """How specific an explanation it is: its kind's rank, then whether it names what is
        involved, then whether it names a frame."""
        return (CAUSE_KINDS[self.kind].rank, bool(self.involves), self.frame is not None)

    def keys(self) -> tuple[tuple[str, ...], ...]:
        """The values a finding of this cause is matched by; none for a bare symptom."""
        keys: list[tuple[str, ...]] = []
        if self.frame is not None:
            keys.append(("raised", self.exception, self.frame.path, str(self.frame.line)))
        if self.involves:
            keys.append(("involves", self.involves))
        elif self.frame is None and CAUSE_KINDS[self.kind].rank > 2:
            keys.append(("kind", self.kind))
        return tuple(keys)

    def with_frame(self, raised: Raised | None) -> Cause:
        """This cause with the frame ``raised`` names, where it names none of its own."""
        if raised is None or self.frame is not None:
            return self
        return Cause(self.kind, self.involves, raised.frame, raised.exception)

    def words(self) -> str:
        """The cause in words: ``a decorated op called a decorated op (AssertionError at
        mod.py:12, in fn)``."""
        text = self.involves or CAUSE_KINDS[self.kind].words
        if self.kind not in ("other", "raised", "crash", "values") and self.involves:
            kind_words = CAUSE_KINDS[self.kind].words
            text = kind_words if self.involves in kind_words else f"{kind_words}: {self.involves}"
        if self.frame is not None:
            text += f" ({self.exception or 'raised'} at {self.frame})"
        return text

    def as_json(self) -> dict[str, Any]:
        frame = self.frame
        return {
            "kind": self.kind,
            "involves": self.involves,
            "exception": self.exception,
            "frame": None if frame is None else [frame.path, frame.line, frame.function],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Cause:
        frame = data.get("frame")
        return cls(
            str(data["kind"]),
            str(data.get("involves", "")),
            None if not frame else Frame(str(frame[0]), int(frame[1]), str(frame[2])),
            str(data.get("exception", "")),
        )


# What a finding of a call that did not return blames (:class:`verification.bounds.Hang`).
HUNG = Cause("hang")
# What a capture the caller dropped but something still holds blames, whichever check saw
# it (its own object, its graphs, its pool memory).
KEPT_ALIVE = Cause("kept-alive")


class Problem(str):
    """A check's problem in words that also carries its :class:`Cause`: a check may return it
    wherever it returns a problem string, and the finding made of it keeps the cause."""

    cause: Cause

    def __new__(cls, text: str, cause: Cause) -> Problem:
        made = super().__new__(cls, text)
        made.cause = cause
        return made

    def prefixed(self, words: str) -> Problem:
        """The same problem with ``words`` before it (where and how the check reached it)."""
        return Problem(words + str(self), self.cause)


def within(words: str, problem: str) -> str:
    """``problem`` with ``words`` before it, keeping the cause it carries."""
    return problem.prefixed(words) if isinstance(problem, Problem) else words + problem


def cause_of(problem: str) -> Cause | None:
    """The cause a problem string carries (a :class:`Problem`), or None."""
    return problem.cause if isinstance(problem, Problem) else None


def raised_cause(error: BaseException, kind: str = "raised", involves: str = "") -> Cause:
    """The cause of ``error``: ``kind`` (``nested-op`` where a decorated op called a decorated
    op on the way to the raise), and the target frame it came from."""
    if kind == "raised" and reentered(error):
        kind, involves = "nested-op", CAUSE_KINDS["nested-op"].words
    return Cause(kind, involves, target_frame(error), type(error).__name__)
