"""The grammar of uses (verification/uses.py): every row is drawn by something that exists,
and docs/harness.md shows the grammar as it is."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from verification.properties import PROPERTIES
from verification.uses import USES, markdown_table

DOCS = Path(__file__).resolve().parents[2] / "docs" / "harness.md"


@pytest.mark.parametrize("use", USES, ids=lambda use: f"{use.entry}: {use.dimension}")
def test_every_dimension_names_what_draws_it(use):
    kind, _, ref = use.drawn_by.partition(":")
    if kind == "check":
        assert ref in PROPERTIES, f"{use.dimension}: no property check {ref!r}"
    else:
        assert kind == "fuzz", use.drawn_by
        module, _, name = ref.partition(":")
        assert hasattr(importlib.import_module(module), name), use.drawn_by
    assert use.values and use.engine


def test_the_docs_show_the_grammar_as_it_is():
    assert markdown_table() in DOCS.read_text(), (
        "docs/harness.md's grammar of uses differs from verification.uses; paste "
        "`python -c 'from verification.uses import markdown_table; print(markdown_table())'`"
    )


def test_dimensions_are_not_listed_twice():
    keys = [(use.entry, use.crossing, use.dimension) for use in USES]
    assert len(keys) == len(set(keys))
