"""The harness's user-facing failure and its exit codes, shared by every command.

A :class:`UsageError` is a mistake in what the user asked for: a command prints it as one
``error: ...`` line on stderr and exits :data:`EXIT_USAGE`, never with a traceback. Ctrl-C ends
a command with :data:`EXIT_INTERRUPTED` (:func:`catch_ctrl_c`, :func:`raise_if_interrupted`).
Warnings the harness provokes on purpose never reach the user, and any other warning says
whose it is (:func:`hide_expected_warnings`).
"""

from __future__ import annotations

import logging
import re
import signal
import sys
import warnings
from pathlib import Path
from types import FrameType
from typing import Any

# Exit statuses of every command: nothing found, a finding (or a failed check), bad input,
# the harness itself failed (so that CI can tell "your code is broken" from "the harness
# broke"), and interrupted by Ctrl-C (the shell's 128 + SIGINT).
EXIT_OK, EXIT_FOUND, EXIT_USAGE, EXIT_HARNESS, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
# What every command's --help says of them.
EXIT_HELP = """\
exit status: 0 nothing found; 1 a bug of the target or of an op (a reproducer is printed);
2 bad input (one "error:" line on stderr); 3 the harness itself failed (a harness-error
finding, or an error in the harness's own code: what was found cannot be trusted);
130 interrupted (Ctrl-C)."""


class UsageError(Exception):
    """A mistake in what the user asked for; the CLI prints it on one line and exits 2."""


# Python drops a KeyboardInterrupt raised while a destructor runs (a simulated graph's
# ``__del__``, say) and the command would run on for minutes, holding its output open (CI saw
# `certify` outlive Ctrl-C by 120 s). So the command's handler also remembers the interrupt, and
# the search loop raises it again at its next example.
_interrupted = False


def _on_ctrl_c(signum: int, frame: FrameType | None) -> None:
    global _interrupted
    _interrupted = True
    raise KeyboardInterrupt


def _unraisable(info: Any, _default: Any = sys.unraisablehook) -> None:
    # The dropped interrupt is remembered: Python's "Exception ignored in ..." would be noise.
    if not isinstance(info.exc_value, KeyboardInterrupt):
        _default(info)


def catch_ctrl_c() -> None:
    """In a command's own process: Ctrl-C is remembered as well as raised, so that one lost in
    a destructor is raised again by :func:`raise_if_interrupted`."""
    global _interrupted
    _interrupted = False
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_ctrl_c)
        sys.unraisablehook = _unraisable


def raise_if_interrupted() -> None:
    """Raises ``KeyboardInterrupt`` if Ctrl-C came and was lost; the loops call it each step."""
    if _interrupted:
        raise KeyboardInterrupt


# What the harness's own work provokes, true of every target: hypothesis rendering a long
# program, torch warning at each empty segment (planted copies and leading breaks end many),
# and CUDA refusing a graph's reset after a capture the harness broke on purpose.
EXPECTED_WARNINGS = (
    "Generating overly large repr",
    "The CUDA Graph is empty",
    "CUDA warning: operation not permitted when stream is capturing",
)
_HARNESS = Path(__file__).resolve().parent


def _show(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    whose = "the harness" if _HARNESS in Path(filename).resolve().parents else "the target"
    first = str(message).splitlines()[0] if str(message) else ""
    print(
        f"warning from {whose} ({filename}:{lineno}): {category.__name__}: {first}",
        file=sys.stderr if file is None else file,
    )


class _LoggedWarnings(logging.Handler):
    """Warnings a target logs (``logger.warning``, not ``warnings.warn``): one line each that
    says whose it is, a message repeated in this process shown once. A target that logs each
    graph it fails to free would otherwise print a line per capture the harness broke."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self._shown: set[tuple[str, str]] = set()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # a target's bad format string must not end the run
            text = str(record.msg)
        first = text.splitlines()[0] if text else ""
        if (record.name, first) in self._shown:
            return
        self._shown.add((record.name, first))
        whose = "the harness" if record.name.split(".")[0] == "verification" else "the target"
        print(
            f"warning from {whose} (logger {record.name}): {record.levelname}: {first} "
            "(shown once)",
            file=sys.stderr,
        )


def hide_expected_warnings() -> None:
    """In a command's process (and its workers): the harness's expected warnings are dropped,
    and every other warning, raised or logged, prints as one line that says whose code
    raised it."""
    for message in EXPECTED_WARNINGS:
        warnings.filterwarnings("ignore", message=re.escape(message))
    warnings.showwarning = _show
    root = logging.getLogger()
    # Only where nobody configured logging: a target's own handlers keep their say.
    if not root.handlers:
        root.addHandler(_LoggedWarnings())
