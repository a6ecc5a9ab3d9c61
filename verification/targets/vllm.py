"""Adapter: vLLM's breakable cudagraph module seen through the harness's target API.

Importing it sets ``VLLM_USE_BREAKABLE_CUDAGRAPH=1`` first, because vLLM's
``eager_break_during_capture`` returns the function undecorated unless that switch is on.
vLLM's capture takes ``add_eager(fn)`` with a zero-argument ``fn`` and a pool that its
wrapper always passes; this adapter binds arguments and gives each capture one pool, as
vLLM's wrapper does. vLLM declares no contract, so it is judged by ``out-buffer``. Without
vLLM installed, importing it raises :class:`~verification.errors.UsageError`.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable
from typing import Any

import torch

from verification.errors import UsageError

os.environ["VLLM_USE_BREAKABLE_CUDAGRAPH"] = "1"

# Newer vLLM moved the module; the old path is a compatibility alias.
_MODULES = ("vllm.backends.compiler.breakable_cudagraph", "vllm.compilation.breakable_cudagraph")


def _import_vllm() -> Any:
    for name in _MODULES:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name is not None and not name.startswith(error.name):
                raise
    raise UsageError(
        "target verification.targets.vllm needs vLLM with breakable cudagraphs "
        f"({' or '.join(_MODULES)}): pip install vllm"
    )


_vllm = _import_vllm()
__version__ = getattr(importlib.import_module("vllm"), "__version__", None)
eager_break_during_capture = _vllm.eager_break_during_capture


class BreakableCUDAGraphCapture(_vllm.BreakableCUDAGraphCapture):
    """vLLM's capture, with a graph pool of its own when none is given."""

    def __init__(self, pool: Any | None = None) -> None:
        super().__init__(pool=torch.cuda.graph_pool_handle() if pool is None else pool)

    def add_eager(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return super().add_eager(functools.partial(fn, *args, **kwargs) if args or kwargs else fn)
