"""``simulated_cuda()``: installs the simulated ``torch.cuda`` surface and the dispatch mode.

Entries are refcounted across threads: the outermost entry opens a session and patches
``torch.cuda`` (and the submodules the names live in), ``torch.Tensor``, the entry points of
``torch.autograd`` and thread start-up, and makes CUDA torch's accelerator; the matching exit
restores every original, also after an exception. Each thread that enters, or starts while
the simulator is active, pushes its own dispatch mode.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import sys
import threading
import types
from collections.abc import Iterator
from typing import Any

import torch
import torch.cuda.graphs
import torch.cuda.memory
import torch.cuda.random
import torch.cuda.streams

from verification.sim import cuda_api, cuda_guard, graph, graph_exec_api, state, streams
from verification.sim.device_rng import DeviceGenerator
from verification.sim.device_tensors import construct_cuda_tensor
from verification.sim.dispatch import SimMode, register_device_kernels
from verification.sim.session import Session

_MODULES = (torch.cuda, torch.cuda.graphs, torch.cuda.streams, torch.cuda.memory, torch.cuda.random)

# Simulated name -> replacement; patched in every module of _MODULES that defines the name
# (always in torch.cuda itself).
_CUDA_NAMES: dict[str, Any] = {
    "CUDAGraph": graph.CUDAGraph,
    "graph": graph.graph,
    "graph_pool_handle": graph.graph_pool_handle,
    "Stream": streams.Stream,
    "Event": streams.Event,
    "stream": streams.stream,
    "current_stream": streams.current_stream,
    "default_stream": streams.default_stream,
    "set_stream": streams.set_stream,
    "is_current_stream_capturing": streams.is_current_stream_capturing,
    "synchronize": cuda_api.synchronize,
    "empty_cache": cuda_api.empty_cache,
    "memory_allocated": cuda_api.memory_allocated,
    "memory_reserved": cuda_api.memory_reserved,
    "memory_snapshot": cuda_api.memory_snapshot,
    "max_memory_allocated": cuda_api.max_memory_allocated,
    "reset_peak_memory_stats": cuda_api.reset_peak_memory_stats,
    "mem_get_info": cuda_api.mem_get_info,
    "memory_stats": cuda_api.memory_stats,
    "get_device_name": cuda_api.get_device_name,
    "get_device_capability": cuda_api.get_device_capability,
    "get_device_properties": cuda_api.get_device_properties,
    "is_available": cuda_api.is_available,
    "device_count": cuda_api.device_count,
    "current_device": cuda_api.current_device,
    "set_device": cuda_api.set_device,
    "manual_seed": cuda_api.manual_seed,
    "manual_seed_all": cuda_api.manual_seed,
    "initial_seed": cuda_api.initial_seed,
    "get_rng_state": cuda_api.get_rng_state,
    "set_rng_state": cuda_api.set_rng_state,
    "_lazy_init": cuda_api.lazy_init,
}

_MISSING = object()
_lock = threading.RLock()
_depth = 0
_saved: list[tuple[Any, str, Any]] = []
_device_kernels: list[torch.library.Library] = []
_thread = threading.local()


def _patch(owner: Any, name: str, value: Any) -> None:
    # Only the owner's own attribute is saved: inherited ones (Tensor methods from
    # TensorBase) are restored by deleting the shadowing attribute.
    _saved.append((owner, name, owner.__dict__.get(name, _MISSING)))
    setattr(owner, name, value)


# CUDA's runtime API as cuda-bindings names it: the simulated graph API stands in for it.
_RUNTIME_MODULE = "cuda.bindings.runtime"
_saved_modules: list[tuple[str, Any]] = []


def _install_runtime_api() -> None:
    for name in ("cuda", "cuda.bindings", _RUNTIME_MODULE):
        _saved_modules.append((name, sys.modules.get(name, _MISSING)))
    if "cuda" not in sys.modules:  # the package is not installed: empty parents
        sys.modules["cuda"] = types.ModuleType("cuda")
    if "cuda.bindings" not in sys.modules:
        sys.modules["cuda.bindings"] = types.ModuleType("cuda.bindings")
    sys.modules[_RUNTIME_MODULE] = graph_exec_api


def _restore_all() -> None:
    cuda_guard.accelerator(False)
    while _saved_modules:
        name, module = _saved_modules.pop()
        if module is _MISSING:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = module
    while _device_kernels:
        _device_kernels.pop()._destroy()
    while _saved:
        owner, name, old = _saved.pop()
        if old is _MISSING:
            delattr(owner, name)
        else:
            setattr(owner, name, old)
    while _saved_sdp:
        name, was = _saved_sdp.pop()
        getattr(torch.backends.cuda, f"enable_{name}_sdp")(was)


# On a CUDA build, scaled_dot_product_attention picks a fused CUDA kernel for cuda-typed
# tensors, which cannot run on the simulator's host memory; its math backend is made of
# ordinary ops that can. A CPU build never picks them.
_FUSED_SDP = ("flash", "mem_efficient", "cudnn")
_saved_sdp: list[tuple[str, bool]] = []


def _use_math_sdp() -> None:
    backends = torch.backends.cuda
    if not backends.is_built():
        return
    for name in _FUSED_SDP:
        _saved_sdp.append((name, getattr(backends, f"{name}_sdp_enabled")()))
        getattr(backends, f"enable_{name}_sdp")(False)


def _bootstrap_with_mode(original: Any) -> Any:
    def _bootstrap_inner(self: threading.Thread) -> None:
        _push_thread_mode()
        try:
            original(self)
        finally:
            _pop_thread_mode()

    return _bootstrap_inner


def _install() -> None:
    for module in _MODULES:
        for name, value in _CUDA_NAMES.items():
            if module is torch.cuda or name in module.__dict__:
                _patch(module, name, value)
    for name, value in cuda_api.tensor_replacements().items():
        _patch(torch.Tensor, name, value)
    for name, value in cuda_api.torch_replacements().items():
        _patch(torch, name, value)
    _patch(torch._tensor_str, "_str", cuda_api._printed_from_host(torch._tensor_str._str))
    _patch(torch._C, "_construct_CUDA_Tensor_From_Storage_And_Metadata", construct_cuda_tensor)
    _patch(
        threading.Thread,
        "_bootstrap_inner",
        _bootstrap_with_mode(threading.Thread._bootstrap_inner),
    )
    _patch(torch.cuda, "default_generators", (state.require().rng.generator,))
    for name in ("backward", "grad"):
        _patch(torch.autograd, name, autograd_on_caller_stream(getattr(torch.autograd, name)))
    _patch(torch, "Generator", DeviceGenerator)
    _install_runtime_api()
    _use_math_sdp()
    _device_kernels.append(register_device_kernels())
    cuda_guard.accelerator(True)


def autograd_on_caller_stream(original: Any) -> Any:
    """``torch.autograd.backward``/``grad``: the engine runs CUDA gradients on a device
    thread of its own, which on a GPU works on the streams of the forward ops; here it
    works on the stream the caller is on (a capture's, inside a capture)."""

    @functools.wraps(original)
    def run(*args: Any, **kwargs: Any) -> Any:
        session = state.require()
        previous = session.autograd_stream
        session.autograd_stream = streams.current_stream()
        try:
            return original(*args, **kwargs)
        finally:
            session.autograd_stream = previous

    return run


def _push_thread_mode() -> None:
    depth = getattr(_thread, "depth", 0)
    if depth == 0:
        _thread.mode = SimMode()
        _thread.mode.__enter__()
    _thread.depth = depth + 1


def _pop_thread_mode() -> None:
    _thread.depth -= 1
    if _thread.depth == 0:
        _thread.mode.__exit__(None, None, None)
        _thread.mode = None


def _warm_imports() -> None:
    # torch's Python meta kernels (elementwise type promotion, which the simulator runs for
    # output layouts) are wrapped in a dynamo guard that imports torch._dynamo (sympy,
    # torch.distributed: seconds) on first use; pay it here, at entry, so it never lands
    # inside whatever the first op is timed or profiled with.
    if "torch._dynamo" in sys.modules:
        return
    # The import makes some 300k long-lived objects; with the collector on, it walks the
    # growing young generations hundreds of times meanwhile, a third of the import's time.
    enabled = gc.isenabled()
    gc.disable()
    try:
        import torch._dynamo  # noqa: F401
    finally:
        if enabled:
            gc.enable()


def _enter() -> None:
    global _depth
    with _lock:
        if _depth == 0:
            _warm_imports()
            cuda_guard.install()
            state.session = Session()
            try:
                _install()
            except BaseException:
                _restore_all()
                state.session = None
                raise
        _depth += 1
    _push_thread_mode()


def _exit() -> None:
    global _depth
    _pop_thread_mode()
    with _lock:
        _depth -= 1
        if _depth == 0:
            _restore_all()
            session, state.session = state.session, None
            session.close()


@contextlib.contextmanager
def simulated_cuda() -> Iterator[None]:
    """Runs the block with ``torch.cuda`` simulated on CPU tensors (re-entrant, thread-safe)."""
    _enter()
    try:
        yield
    finally:
        _exit()


def is_active() -> bool:
    return state.session is not None
