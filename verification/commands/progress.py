"""A progress bar for ``certify``: ``rich`` on a terminal, plain lines otherwise.

:func:`progress_bar` yields ``(start_check, advance)``: ``start_check(name, budget)`` opens
a bar for a check, ``advance(n)`` moves it. Not on a TTY (CI, pipes) or without ``rich``,
it prints a line when a check starts and at every tenth of its budget, so logs stay short.
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
        state = {"name": "", "budget": 0, "done": 0}

        def start_plain(name: str, budget: int | None) -> None:
            state.update(name=name, budget=budget or 0, done=0)
            print(f"certify: running {name} (up to {budget or '?'} examples)", file=stream)

        def advance_plain(n: int) -> None:
            before, state["done"] = state["done"], state["done"] + n
            step = max(1, state["budget"] // 10)
            if state["budget"] and before // step != state["done"] // step:
                print(f"certify: {state['name']} {state['done']}/{state['budget']}", file=stream)

        yield start_plain, advance_plain
        return
    with Progress(console=Console(file=stream), transient=False) as bar:
        current: list[int] = []

        def start(name: str, budget: int | None) -> None:
            current[:] = [bar.add_task(name, total=budget)]

        def advance(n: int) -> None:
            if current:
                bar.advance(current[0], n)

        yield start, advance
