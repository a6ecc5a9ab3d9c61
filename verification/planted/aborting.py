"""A copy of the library that kills its process inside a break at capture, as torch does on
a CUDA error it cannot raise: it prints a C++ exception's report, as torch's, then aborts.

It proves that a check run in a child reports such a death with the scenario and the target
call it happened in, the signal, and the error's first line rather than the report's last
stack frame. Only for children: in the process that runs it, the first break at capture ends
that process.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

from verification.planted.property_targets import _copy, library_target

# The shape of torch's report of an uncaught c10::Error (the message, then the frames).
CPP_ERROR = (
    "terminate called after throwing an instance of 'c10::Error'\n"
    "  what():  CUDA error: an illegal memory access was encountered\n"
    "Exception raised from c10_cuda_check_implementation at "
    "/pytorch/c10/cuda/CUDAException.cpp:44 (most recent call first):\n"
    "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (0x7f3a1c2b1a48)\n"
    "frame #36: _start + 0x25 (0x657a05 in python3)\n"
)


def build(variant: str | None = None) -> SimpleNamespace:
    """The library copy whose every break at capture aborts (``variant`` is not used)."""
    lib = _copy("aborts_in_a_break")
    if not getattr(lib, "_planted", False):

        def _captured_break(self: Any, *args: Any) -> Any:
            os.write(2, CPP_ERROR.encode())
            os.abort()

        lib.BreakableCUDAGraphCapture._captured_break = _captured_break
        lib._planted = True
    return library_target(lib, "aborting", "aborting", None)
