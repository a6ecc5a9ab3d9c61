"""Progress for the long commands (``fuzz``, ``check``, ``fuzz-op``, ``certify``, ``mutate``).

:func:`progress_bar` yields ``(start, advance)``: ``start(name, total, unit)`` opens a bar for
one step (``total`` None: unknown), ``advance(n)`` moves the current one. On a terminal it is
drawn by ``rich`` with the count, the rate in units per second and the time left; when the
stream is not a terminal, under ``-q``, or without ``rich``, nothing at all is printed.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Protocol, TextIO


class Start(Protocol):
    def __call__(self, name: str, total: int | None, unit: str = "examples") -> None: ...


Advance = Callable[[int], None]


def _silent_start(name: str, total: int | None, unit: str = "examples") -> None:
    return None


def _silent_advance(n: int) -> None:
    return None


@contextlib.contextmanager
def progress_bar(
    stream: TextIO = sys.stderr, quiet: bool = False
) -> Iterator[tuple[Start, Advance]]:
    if quiet or not stream.isatty():
        yield _silent_start, _silent_advance
        return
    try:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
    except ImportError:
        yield _silent_start, _silent_advance
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[unit]}"),
        TaskProgressColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(file=stream), transient=False) as bar:
        current: list = []

        def start(name: str, total: int | None, unit: str = "examples") -> None:
            if current:
                bar.stop_task(current[0])
            current[:] = [bar.add_task(name, total=total, unit=unit, rate="")]

        def advance(n: int) -> None:
            if not current:
                return
            bar.advance(current[0], n)
            task = bar.tasks[-1]
            if task.speed:
                bar.update(current[0], rate=f"{task.speed:.1f}/s")

        yield start, advance
