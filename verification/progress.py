"""A progress bar for ``certify``: ``rich`` on a terminal, plain lines otherwise.

:func:`progress_bar` yields ``(start_check, advance)``: ``start_check(name, budget)`` opens
a bar for a check, ``advance(n)`` moves it. Not on a TTY (CI, pipes) or without ``rich``,
it prints one line per check instead, so logs stay readable.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import TextIO

StartCheck = Callable[[str, "int | None"], None]
Advance = Callable[[int], None]


@contextlib.contextmanager
def progress_bar(stream: TextIO = sys.stderr) -> Iterator[tuple[StartCheck, Advance]]:
    try:
        from rich.console import Console
        from rich.progress import Progress
    except ImportError:
        Progress = None
    if Progress is None or not stream.isatty():

        def start_plain(name: str, budget: int | None) -> None:
            print(f"certify: running {name} (up to {budget or '?'} examples)", file=stream)

        yield start_plain, lambda advance: None
        return
    with Progress(console=Console(file=stream), transient=False) as bar:
        current: list[int] = []

        def start(name: str, budget: int | None) -> None:
            current[:] = [bar.add_task(name, total=budget)]

        def advance(n: int) -> None:
            if current:
                bar.advance(current[0], n)

        yield start, advance
