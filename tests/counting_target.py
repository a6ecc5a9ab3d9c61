"""The library as a target that counts how often the harness loads it.

``load_target`` reads ``REPRODUCER_IMPORT`` from every module it is given (by name or as a
module); this one has none, so each read reaches the module's ``__getattr__`` (PEP 562) and
counts one load. Python's import cache hides re-imports; this sees every resolution.
"""

from __future__ import annotations

from typing import Any

from breakable_cudagraph import BreakableCUDAGraphCapture, eager_break_during_capture

__all__ = ["BreakableCUDAGraphCapture", "eager_break_during_capture"]
LOADS = 0


def __getattr__(name: str) -> Any:
    global LOADS
    if name == "REPRODUCER_IMPORT":
        LOADS += 1
    raise AttributeError(name)
