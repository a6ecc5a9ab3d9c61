"""Adapter: vLLM's ``vllm/compilation/breakable_cudagraph.py`` (canonical since it landed; in
0.33.0 its decorator is live without ``VLLM_USE_BREAKABLE_CUDAGRAPH``) seen through the
harness's target API.

The module comes from the installed vLLM, imported whole where vLLM loads (a GPU machine with
its dependencies), else from that package's file (or a checkout's, ``--target-path``) with
stand-ins for the imports it makes (:mod:`verification.targets.upstream`): ``weak_ref_tensor``
as vLLM's C++ defines it; no forward context, as in a bare capture; the rest is used only by
``BreakableCUDAGraphWrapper``, which is not under test. vLLM's ``add_eager`` takes a
zero-argument ``fn`` and its wrapper always passes a pool: this adapter binds arguments and gives
each capture one pool, as the wrapper does. Judged by ``out-buffer``, vLLM's contract, with its
runner's duties (collector frozen and disabled around captures, one capturing thread). Without
vLLM, importing this raises :class:`~verification.errors.UsageError`.
"""

from __future__ import annotations

import enum
import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from verification.targets import upstream

MODULE = "vllm.compilation.breakable_cudagraph"
RELATIVE = "compilation/breakable_cudagraph.py"
BREAK_CONTRACT = "out-buffer"
# What the module guards itself of its runner's duties: nothing. It never touches the collector
# (the wrapper's gc.collect before a capture is cleanup; gpu_model_runner's
# freeze_gc_for_cudagraph_capture turns it off), it keeps one open capture per thread but lets
# threads capture side by side in torch's global mode, and it captures on the current stream,
# which graph_capture() makes a stream of the runner's own.
GUARDS: tuple[str, ...] = ()


def _unavailable(what: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{what} is a stand-in: only BreakableCUDAGraphWrapper needs it")

    return call


class _CUDAGraphMode(enum.Enum):
    NONE = 0
    PIECEWISE = 1
    FULL = 2


def _weak_ref_tensor(tensor: Any) -> Any:
    # vllm.utils.torch_utils.weak_ref_tensor: empty tensors and non-tensors pass unchanged.
    if isinstance(tensor, torch.Tensor) and tensor.numel() > 0:
        return upstream.weak_ref_tensor(tensor)
    return tensor


def _weak_ref_tensors(tensors: Any) -> Any:
    if isinstance(tensors, torch.Tensor):
        return _weak_ref_tensor(tensors)
    if isinstance(tensors, (list, tuple)):
        return type(tensors)(_weak_ref_tensor(t) for t in tensors)
    raise ValueError("Invalid type for tensors")


def _register_stand_ins() -> None:
    stand = upstream.stand_in
    stand("vllm.envs", VLLM_USE_BREAKABLE_CUDAGRAPH=True, VLLM_ENABLE_CUDAGRAPH_GC=False)
    stand("vllm.compilation.cudagraph_pool", capture_pool=_unavailable("capture_pool"))
    stand(
        "vllm.compilation.monitor",
        validate_cudagraph_capturing_enabled=_unavailable("validate_cudagraph_capturing_enabled"),
    )
    stand("vllm.config", CUDAGraphMode=_CUDAGraphMode, VllmConfig=type("VllmConfig", (), {}))
    stand(
        "vllm.forward_context",
        BatchDescriptor=type("BatchDescriptor", (), {}),
        get_forward_context=_unavailable("get_forward_context"),
        is_forward_context_available=lambda: False,
    )
    stand("vllm.logger", init_logger=logging.getLogger)
    stand(
        "vllm.model_executor.layers.fusion.quant_activation",
        QuantizedActivation=type("QuantizedActivation", (), {}),
    )
    stand("vllm.model_executor.offloader.base", get_offloader=_unavailable("get_offloader"))
    stand("vllm.platforms", current_platform=None)
    stand(
        "vllm.utils.torch_utils",
        weak_ref_tensor=_weak_ref_tensor,
        weak_ref_tensors=_weak_ref_tensors,
    )


def _from_files(root: Path) -> Any:
    _register_stand_ins()
    return upstream.load_file(MODULE, root / "vllm" / RELATIVE)


_vllm, __version__, ORIGIN = upstream.load_engine_module(
    "vllm", RELATIVE, "verification.targets.vllm", MODULE, _from_files
)
eager_break_during_capture = _vllm.eager_break_during_capture


class BreakableCUDAGraphCapture(_vllm.BreakableCUDAGraphCapture):
    """vLLM's capture, with a graph pool of its own when none is given."""

    def __init__(self, pool: Any | None = None) -> None:
        super().__init__(pool=torch.cuda.graph_pool_handle() if pool is None else pool)

    def add_eager(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return super().add_eager(functools.partial(fn, *args, **kwargs) if args or kwargs else fn)
