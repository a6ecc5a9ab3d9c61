"""Device tensors: plain ``torch.Tensor`` objects on ``cuda:0`` whose bytes are host memory.

CPU-only torch cannot allocate a CUDA tensor, but it can describe one: a DLPack capsule
that claims device CUDA yields a CUDA TensorImpl over the capsule's host bytes. From that
seed, :func:`device_view` builds a CUDA tensor over any storage by running CPU kernels
(``view.dtype``, ``alias``, ``set_``) on it directly, and :func:`host_view` is the inverse:
a CPU tensor over the same bytes. No CUDA kernel ever runs; the simulator's dispatch mode
computes every op on host views, so ``is_cuda``, ``device``, ``data_ptr`` and
``untyped_storage`` are torch's own answers.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator
from typing import Any

import torch
import torch.cuda
from torch.utils.dlpack import to_dlpack

DEVICE = torch.device("cuda", 0)
HOST = torch.device("cpu")
# Running a kernel through this key set ignores the tensor's device: CPU kernels that only
# touch metadata (alias, set_, view.dtype) work on a CUDA TensorImpl.
_CPU_KERNELS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_KDL_CUDA = 2
# Looked up once: ``torch.ops.aten.x.y`` is four attribute lookups, and every device op's
# result pays for these two.
_ALIAS = torch.ops.aten.alias.default
_SET = torch.ops.aten.set_.source_Storage_storage_offset


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLTensorHead(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

_seed_bytes = torch.zeros(64, dtype=torch.uint8)  # the seed's memory, never read
_seed: torch.Tensor | None = None
_by_dtype: dict[torch.dtype, torch.Tensor] = {}


@contextlib.contextmanager
def cuda_initialised() -> Iterator[None]:
    """CPU torch refuses to build CUDA objects until ``torch.cuda._lazy_init`` succeeds."""
    original = torch.cuda._lazy_init
    torch.cuda._lazy_init = lambda: None
    try:
        yield
    finally:
        torch.cuda._lazy_init = original


def _make_seed() -> torch.Tensor:
    capsule = to_dlpack(_seed_bytes)
    head = _DLTensorHead.from_address(_capsule_pointer(capsule, b"dltensor"))
    head.device.device_type = _KDL_CUDA
    head.device.device_id = 0
    with cuda_initialised():
        return torch._C._from_dlpack(capsule)


def _template(dtype: torch.dtype) -> torch.Tensor:
    global _seed
    template = _by_dtype.get(dtype)
    if template is None:
        if _seed is None:
            _seed = _make_seed()
        template = torch.ops.aten.view.dtype.redispatch(_CPU_KERNELS, _seed, dtype)
        _by_dtype[dtype] = template
    return template


def device_storage(address: int, nbytes: int) -> torch.UntypedStorage:
    """A CUDA storage over ``nbytes`` of host memory at ``address`` that owns nothing."""
    return torch._C._construct_storage_from_data_pointer(address, DEVICE, nbytes)


def device_view(
    storage: torch.UntypedStorage, dtype: torch.dtype, size: Any, stride: Any, offset: int
) -> torch.Tensor:
    """A CUDA tensor viewing ``storage`` (a CUDA storage) with the given layout."""
    t = _ALIAS.redispatch(_CPU_KERNELS, _template(dtype))
    return _SET.redispatch(_CPU_KERNELS, t, storage, offset, list(size), list(stride))


def set_layout(
    t: torch.Tensor, storage: torch.UntypedStorage, offset: int, size: Any, stride: Any
) -> None:
    """Points the device tensor ``t`` at ``storage`` with a new layout, in place."""
    _SET.redispatch(_CPU_KERNELS, t, storage, offset, list(size), list(stride))


def host_storage(storage: torch.UntypedStorage) -> torch.UntypedStorage:
    """A CPU storage over the same bytes as the CUDA ``storage`` (same base, same size)."""
    return torch._C._construct_storage_from_data_pointer(storage.data_ptr(), HOST, storage.nbytes())


def host_view_on(storage: torch.UntypedStorage, like: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over host ``storage`` with ``like``'s dtype, layout and conj/neg bits."""
    with torch._C._DisableTorchDispatch():
        t = torch.empty(0, dtype=like.dtype, device=HOST).set_(
            storage, like.storage_offset(), like.shape, like.stride()
        )
    if like.is_conj():
        torch._C._set_conj(t, True)
    if like.is_neg():
        torch._C._set_neg(t, True)
    return t


def copy_bits(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    if src.is_conj():
        torch._C._set_conj(dst, True)
    if src.is_neg():
        torch._C._set_neg(dst, True)
    return dst


def construct_cuda_tensor(metadata: dict[str, Any], storage: torch.UntypedStorage) -> torch.Tensor:
    """``torch._C._construct_CUDA_Tensor_From_Storage_And_Metadata`` for the simulator."""
    return device_view(
        storage,
        metadata["dtype"],
        metadata["size"],
        metadata["stride"],
        metadata.get("storage_offset", 0),
    )
