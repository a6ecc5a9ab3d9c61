"""Copies between host and device memory, and pinned host memory, with CUDA's capture rules.

Pinned host memory is ordinary CPU memory the session registers (and keeps, as CUDA's
caching host allocator does). On a capturing stream a copy to or from pinned memory is
recorded and runs at replay; one to or from pageable memory raises torch's pinned-memory
error and leaves the capture valid. Outside capture a pageable copy synchronises the host,
so a "global" capture elsewhere forbids it as it forbids ``.item()``.
"""

from __future__ import annotations

from typing import Any

import torch

from verification.sim import cuda_errors
from verification.sim.bridge import Bridge, is_device
from verification.sim.streams import current_stream


class PinnedMemory:
    """Host storages allocated pinned, by base address."""

    def __init__(self) -> None:
        self._storages: dict[int, torch.UntypedStorage] = {}

    def register(self, t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        self._storages[storage.data_ptr()] = storage
        return t

    def holds(self, t: torch.Tensor) -> bool:
        return not t.is_cuda and t.untyped_storage().data_ptr() in self._storages

    def clear(self) -> None:
        self._storages.clear()


def _empty_like_on(
    host_like: torch.Tensor, dtype: torch.dtype | None, memory_format: Any
) -> torch.Tensor:
    fmt = torch.preserve_format if memory_format is None else memory_format
    return torch.empty_like(host_like, dtype=dtype or host_like.dtype, memory_format=fmt)


def copy(
    dst: torch.Tensor,
    src: torch.Tensor,
    non_blocking: bool,
    session: Any,
    capture: Any,
    record: Any,
) -> torch.Tensor:
    """``dst.copy_(src)`` with exactly one of them on the device; ``record`` captures a call."""
    host = src if is_device(dst) else dst
    pinned = session.pinned.holds(host)
    if capture is not None:
        if not pinned:
            raise RuntimeError(cuda_errors.HOST_COPY)
        record(torch.ops.aten.copy_.default, (dst, src, non_blocking))
        return dst
    if not (pinned and non_blocking):
        session.check_unsafe_call()
    bridge = Bridge(session.allocator)
    host_dst, host_src = bridge.to_host(dst), bridge.to_host(src)
    with torch._C._DisableTorchDispatch():
        host_dst.copy_(host_src)
    if session.races is not None:
        stream = current_stream()
        session.races.op(
            torch.ops.aten.copy_.default, (host_dst, host_src), {}, None, stream, "eager"
        )
        if not (pinned and non_blocking):
            session.races.host_waits_for_stream(stream)
    return dst


def to_copy(
    x: torch.Tensor, kwargs: dict[str, Any], session: Any, capture: Any, record: Any
) -> Any:
    """``aten._to_copy`` across devices: a fresh tensor on the target, then :func:`copy`."""
    non_blocking = bool(kwargs.get("non_blocking", False))
    dtype, fmt = kwargs.get("dtype"), kwargs.get("memory_format")
    if is_device(x):
        # CUDA allocates the host side pinned for a non-blocking device-to-host copy.
        bridge = Bridge(session.allocator)
        with torch._C._DisableTorchDispatch():
            out = _empty_like_on(bridge.host_view(x), dtype, fmt)
        if non_blocking or kwargs.get("pin_memory"):
            session.pinned.register(out)
        return copy(out, x, non_blocking, session, capture, record)
    pool = capture.pool if capture is not None else session.allocator.default_pool
    with torch._C._DisableTorchDispatch():
        host_out = _empty_like_on(x, dtype, fmt)
    out = Bridge(session.allocator).fresh(host_out, pool)
    return copy(out, x, non_blocking, session, capture, record)
