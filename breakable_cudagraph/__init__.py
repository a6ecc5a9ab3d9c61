"""Breakable CUDA graph capture for PyTorch: CUDA graph segments chained by eager breaks.

Public names follow vLLM's ``vllm/compilation/breakable_cudagraph.py`` so code moves between the
two unchanged. Everything is written against the real ``torch.cuda`` API.
"""

from .breaks import eager_break_during_capture
from .capture import BreakableCUDAGraphCapture
from .capture_set import CaptureSet
from .runner import BreakableGraphRunner
from .segments import EagerStep, GraphSegment
from .switch import DISABLE_ENV_VAR, graphs_disabled

__version__ = "0.1.0"
# The harness's contract declaration: a tensor a break returns is refreshed at every replay.
BREAK_CONTRACT = "returns"
# And its promise: a capture intermediate given to a break dies when the caller drops it
# (arguments.hold_for_replay keeps a non-owning alias), so holding one is a bug.
RELEASES_BREAK_ARGUMENTS = True
# And that it needs no caller's help: it pauses the collector itself and keeps each capture to
# its own thread, so the harness tests it without the duties vLLM's runner takes on.
GUARDS_ITSELF = True

__all__ = [
    "DISABLE_ENV_VAR",
    "BreakableCUDAGraphCapture",
    "BreakableGraphRunner",
    "CaptureSet",
    "EagerStep",
    "GraphSegment",
    "eager_break_during_capture",
    "graphs_disabled",
]
