"""Copies of the library whose ``BreakableGraphRunner`` breaks eager semantics in one way each,
for the runner property to find.

:func:`build` plants one bug of :data:`BUGS` into a private copy of ``breakable_cudagraph``
(made as for the other planted targets), so that every other behaviour is the library's own.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import torch

from verification.planted.property_targets import _copy, _edited, library_target

_RUNNER = "runner"


def _no_write_back(lib: ModuleType) -> None:
    lib.runner._write_back = lambda static, inputs, written: None


def _warmup_write_twice(lib: ModuleType) -> None:
    # Both copies between the warm-up and the first replay go, as the runner had it before.
    source = Path(lib.runner.__file__).read_text()
    start, end = source.index("        if self.warmup:\n"), source.index("_, replay_written")
    span = source[start:end]
    _edited(_RUNNER, span, span.replace("_copy_into(static, inputs)", "pass"))(lib)


def _alias_output_copied(lib: ModuleType) -> None:
    lib.runner._caller_view = lambda out, buffer, caller: out.clone()


def _signature_ignores_values(lib: ModuleType) -> None:
    keyed = lib.runner.input_signature

    def input_signature(tree: Any) -> Any:
        # The original recurses through this module global, so containers still come here.
        if isinstance(tree, torch.Tensor) or lib.runner.children(tree) is not None:
            return keyed(tree)
        return "a value"

    lib.runner.input_signature = input_signature


# name: (what is wrong, how it is planted)
BUGS: dict[str, tuple[str, Callable[[ModuleType], None]]] = {
    "runner_no_write_back": (
        "the runner never writes an input fn wrote back into the caller's tensor",
        _no_write_back,
    ),
    "runner_warmup_write_twice": (
        "the first replay runs on buffers the warm-up already wrote",
        _warmup_write_twice,
    ),
    "runner_capture_write_twice": (
        "the first replay runs on buffers the capture's eager breaks already wrote",
        _edited(
            _RUNNER,
            "            _copy_into(static, inputs)\n            _, replay_written",
            "            _, replay_written",
        ),
    ),
    "runner_warmup_write_twice_eager": (
        "with graphs disabled, the first call runs on buffers the warm-up already wrote",
        _edited(_RUNNER, "        if self.warmup:\n", "        if False:\n"),
    ),
    "runner_alias_output_copied": (
        "an output that is (a view of) an input is returned as a copy, not the caller's tensor",
        _alias_output_copied,
    ),
    "runner_alias_view_per_output": (
        "an output object returned twice that views an input comes back as two views",
        _edited(_RUNNER, "        if id(out) not in views:\n", "        if True:\n"),
    ),
    "runner_signature_ignores_values": (
        "a non-tensor argument is left out of the signature key",
        _signature_ignores_values,
    ),
}


def build(variant: str) -> SimpleNamespace:
    """The library copy with runner bug ``variant`` planted."""
    if variant not in BUGS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(BUGS)}")
    lib = _copy(f"runner_{variant}")
    if not getattr(lib, "_planted", False):
        BUGS[variant][1](lib)
        lib._planted = True
    return library_target(lib, "runner", "runner_targets", variant)
