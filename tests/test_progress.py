"""certify's progress bar draws with rich on a terminal and degrades to one plain line per
check otherwise, so CI logs stay readable."""

from __future__ import annotations

import io

import pytest

from verification.commands.progress import progress_bar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_not_a_terminal_prints_plain_lines_at_each_tenth_of_the_budget():
    stream = io.StringIO()
    with progress_bar(stream) as (start, advance):
        start("fuzz", 100)
        for _ in range(25):
            advance(1)
        start("sensitivity", None)
        advance(1)
    assert stream.getvalue().splitlines() == [
        "certify: running fuzz (up to 100 examples)",
        "certify: fuzz 10/100",
        "certify: fuzz 20/100",
        "certify: running sensitivity (up to ? examples)",
    ]


def test_terminal_draws_a_bar_per_check():
    pytest.importorskip("rich")
    stream = _Terminal()
    with progress_bar(stream) as (start, advance):
        start("fuzz", 4)
        advance(4)
    assert "fuzz" in stream.getvalue() and "certify: running" not in stream.getvalue()
