"""Verification harness for breakable CUDA graph implementations.

Data flows one way: a program (``programs``) runs through two executors (eager, and
capture-then-replay with a target from ``targets``), then the ``oracle`` compares them,
and ``report`` turns a finding into a standalone reproducer. ``sim`` stands in for CUDA
on machines without a GPU.

The public face is what a break op's spec needs: ``from verification import BreakOpSpec,
TensorArg`` (:mod:`verification.userops.spec`). The names load on first use, so that
``python -m verification --help`` and the pytest plugin do not import torch for them.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["BreakOpSpec", "TensorArg", "WriteMask", "validate"]

# Where each public name lives. A string, so that importing this package imports nothing.
_SPEC_MODULE = "verification.userops.spec"


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module(_SPEC_MODULE), name)
    raise AttributeError(f"module 'verification' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
