"""certify's progress bar draws with rich on a terminal and degrades to one plain line per
check otherwise, so CI logs stay readable."""

from __future__ import annotations

import io

import pytest

from verification.progress import progress_bar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_not_a_terminal_prints_one_plain_line_per_check():
    stream = io.StringIO()
    with progress_bar(stream) as (start, advance):
        start("fuzz", 10)
        advance(3)
        start("sensitivity", None)
    assert stream.getvalue().splitlines() == [
        "certify: running fuzz (up to 10 examples)",
        "certify: running sensitivity (up to ? examples)",
    ]


def test_terminal_draws_a_bar_per_check():
    pytest.importorskip("rich")
    stream = _Terminal()
    with progress_bar(stream) as (start, advance):
        start("fuzz", 4)
        advance(4)
    assert "fuzz" in stream.getvalue() and "certify: running" not in stream.getvalue()
