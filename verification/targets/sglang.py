"""Adapter: SGLang's breakable CUDA graph (``sglang/srt/model_executor/runner_backend_utils/
breakable_cuda_graph/``) seen through the harness's target API.

The module comes from the installed SGLang, imported whole where SGLang loads, else from that
package's files (or a checkout's, ``--target-path``): ``breakable_cuda_graph.py`` and its
``cuda_utils.py``, unchanged, with stand-ins (:mod:`verification.targets.upstream`) for
``sglang.srt.utils`` (CUDA: ``torch.cuda`` is the device module), for ``weak_ref_tensors``
(sgl_kernel's ``weak_ref_tensor``, the same as vLLM's) and, where cuda-python is missing or the
simulator runs, for ``cudaStreamGetCaptureInfo``. The adapter wraps SGLang's
``BreakableCUDAGraph`` + ``BreakableCUDAGraphCapture`` into one capture object, with one pool
per capture as SGLang's runner passes; its decorator is ``eager_on_graph``. SGLang refreshes a
break's returned tensors at replay (``_copy_output``), so it is judged by the ``sglang``
contract. Without SGLang, importing this raises :class:`~verification.errors.UsageError`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import torch

from verification.targets import upstream

PACKAGE = "sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph"
MODULE = f"{PACKAGE}.breakable_cuda_graph"
RELATIVE = "srt/model_executor/runner_backend_utils/breakable_cuda_graph"
BREAK_CONTRACT = "sglang"


def _weak_ref_tensors(tensors: Any) -> Any:
    # runner_backend_utils/weak_ref_tensor.py: a tensor, or a list or tuple of them.
    if isinstance(tensors, torch.Tensor):
        return upstream.weak_ref_tensor(tensors)
    if isinstance(tensors, (list, tuple)):
        return type(tensors)(upstream.weak_ref_tensor(t) for t in tensors)
    raise ValueError("Invalid type for tensors")


def _register_stand_ins(runtime: Any) -> None:
    stand = upstream.stand_in
    stand(
        "sglang.srt.utils",
        get_device_module=lambda: torch.cuda,
        is_hip=lambda: torch.version.hip is not None,
        is_xpu=lambda: False,
    )
    stand(
        "sglang.srt.model_executor.runner_backend_utils.weak_ref_tensor",
        weak_ref_tensors=_weak_ref_tensors,
    )
    try:
        import cuda.bindings.runtime  # noqa: F401  (installed: the module imports it as is)
    except ImportError:
        stand("cuda.bindings", runtime=runtime)


def _from_files(root: Path) -> Any:
    runtime = upstream.CudaRuntime()
    _register_stand_ins(runtime)
    folder = root / "sglang" / RELATIVE
    cuda_utils = upstream.load_file(f"{PACKAGE}.cuda_utils", folder / "cuda_utils.py")
    module = upstream.load_file(MODULE, folder / "breakable_cuda_graph.py")
    # The capture-status query, answered by the simulator while it runs.
    cuda_utils.rt = module.rt = runtime
    return module


_sglang, __version__, ORIGIN = upstream.load_engine_module(
    "sglang",
    f"{RELATIVE}/breakable_cuda_graph.py",
    "verification.targets.sglang",
    MODULE,
    _from_files,
)
eager_break_during_capture = _sglang.eager_on_graph


class BreakableCUDAGraphCapture:
    """SGLang's ``BreakableCUDAGraphCapture`` over a ``BreakableCUDAGraph`` of its own."""

    def __init__(
        self,
        pool: Any | None = None,
        *,
        stream: Any | None = None,
        capture_error_mode: str = "global",
    ) -> None:
        self.graph = _sglang.BreakableCUDAGraph()
        self.pool = torch.cuda.graph_pool_handle() if pool is None else pool
        self._capture = _sglang.BreakableCUDAGraphCapture(
            self.graph, pool=self.pool, stream=stream, capture_error_mode=capture_error_mode
        )
        # What current() hands back, held weakly: a cycle through the adapter would keep a
        # dropped capture, and its graphs, alive until the cyclic collector runs.
        self._capture.adapter = weakref.ref(self)

    @staticmethod
    def current() -> Any:
        """The capture SGLang records as open in this context (a ContextVar)."""
        open_ = _sglang._current_capture_var.get()
        adapter = getattr(open_, "adapter", None)
        return open_ if adapter is None else adapter()

    def __enter__(self) -> BreakableCUDAGraphCapture:
        self._capture.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        return bool(self._capture.__exit__(exc_type, exc, tb))

    def add_eager(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A break through SGLang's own decorator, the only way SGLang records one."""
        return _sglang.eager_on_graph(fn)(*args, **kwargs)

    def replay(self) -> None:
        self.graph.replay()
