"""Simulated module-level ``torch.cuda`` functions and the ``torch.Tensor`` methods patched.

Device tensors are real CUDA tensors (:mod:`device_tensors`), so ``cuda()``, ``to()``,
``cpu()``, ``tolist()`` and ``numpy()`` are torch's own; only ``torch.tensor``/``as_tensor``
with a device target and ``record_stream`` need replacing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import _get_current_function_mode_stack as _function_modes
from torch.utils._device import DeviceContext
from torch.utils._python_dispatch import _disable_current_modes

from verification.sim import cuda_errors, state
from verification.sim.streams import check_host_sync, current_stream


def synchronize(device: Any = None) -> None:
    check_host_sync(None, device_wide=True)
    # A device-wide sync waits on every capturing stream: only "relaxed" captures allow it.
    session = state.require()
    for capture in list(session.captures):
        if capture.mode != "relaxed":
            capture.invalidate()
            raise RuntimeError(cuda_errors.NOT_PERMITTED)
    races = state.require().races
    if races is not None:
        races.host_waits_for_device()


def empty_cache() -> None:
    session = state.require()
    session.allocator.release_unused(session.capturing_pools())


def memory_allocated(device: Any = None) -> int:
    return state.require().allocator.stats()[0]


def memory_reserved(device: Any = None) -> int:
    return state.require().allocator.stats()[1]


# What an H200 reports (torch.cuda.mem_get_info total, get_device_name).
DEVICE_TOTAL_BYTES = 150_754_820_096
DEVICE_NAME = "NVIDIA H200 (simulated)"


def max_memory_allocated(device: Any = None) -> int:
    return state.require().allocator.peak_allocated()


def reset_peak_memory_stats(device: Any = None) -> None:
    state.require().allocator.reset_peak()


def mem_get_info(device: Any = None) -> tuple[int, int]:
    return DEVICE_TOTAL_BYTES - memory_reserved(), DEVICE_TOTAL_BYTES


def memory_stats(device: Any = None) -> dict[str, int]:
    allocated, reserved = state.require().allocator.stats()
    return {
        "allocated_bytes.all.current": allocated,
        "allocated_bytes.all.peak": max_memory_allocated(),
        "reserved_bytes.all.current": reserved,
        "num_alloc_retries": 0,
        "num_ooms": 0,
    }


def get_device_name(device: Any = None) -> str:
    return DEVICE_NAME


def get_device_capability(device: Any = None) -> tuple[int, int]:
    return (9, 0)


@dataclass(frozen=True)
class DeviceProperties:
    """What ``torch.cuda.get_device_properties`` reports for an H200 (autocast reads it)."""

    name: str = DEVICE_NAME
    major: int = 9
    minor: int = 0
    total_memory: int = DEVICE_TOTAL_BYTES
    multi_processor_count: int = 132
    max_threads_per_multi_processor: int = 2048
    warp_size: int = 32
    L2_cache_size: int = 62_914_560
    is_integrated: bool = False
    is_multi_gpu_board: bool = False
    gcnArchName: str = "NVIDIA H200"


def get_device_properties(device: Any = None) -> DeviceProperties:
    return DeviceProperties()


def memory_snapshot(*args: Any, **kwargs: Any) -> list[dict[str, object]]:
    return state.require().allocator.snapshot()


def is_available() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


def set_device(device: Any) -> None:
    pass  # one simulated device


def manual_seed(seed: int) -> None:
    """Seeds the device generator only (``torch.manual_seed`` seeds the host one itself)."""
    rng = state.require().rng
    seed = int(seed)
    if current_stream().capture is not None and seed != rng.seed:
        raise RuntimeError(cuda_errors.SEED_IN_CAPTURE)
    rng.manual_seed(seed)


def initial_seed() -> int:
    return state.require().rng.seed


def get_rng_state(device: Any = "cuda") -> torch.Tensor:
    return state.require().rng.generator.get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "cuda") -> None:
    state.require().rng.generator.set_state(new_state)


def _names_device(device: Any) -> bool:
    if isinstance(device, int) and not isinstance(device, bool):
        return True  # an ordinal: CUDA device 0
    return isinstance(device, (str, torch.device)) and torch.device(device).type == "cuda"


def _default_is_device() -> bool:
    """Whether ``with torch.device("cuda"):`` or ``torch.set_default_device("cuda")`` holds:
    the innermost device mode on the torch-function stack names CUDA."""
    if not torch._C._len_torch_function_stack():
        return False
    for mode in reversed(_function_modes()):
        if isinstance(mode, DeviceContext):
            return mode.device.type == "cuda"
    return False


@contextlib.contextmanager
def _simulator_mode_only() -> Iterator[None]:
    """Dispatch modes other than the simulator's off for the block: what CUDA torch does
    with modes excluded, the simulator must still run as device work."""
    from verification.sim.dispatch import SimMode

    with _disable_current_modes(), SimMode():
        yield


def _built_on_host(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.tensor``/``as_tensor`` with a device target: CPU torch refuses the device
    guard they open, so build the host tensor and move it, which is what CUDA does too.
    ``pin_memory=True`` pins the host tensor built (a device target is then torch's error)."""

    def make(data: Any, *args: Any, device: Any = None, **kwargs: Any) -> torch.Tensor:
        if kwargs.pop("pin_memory", False):
            # torch builds it below the dispatch mode, where CPU torch has no pinned memory.
            return make(data, *args, device=device, **kwargs).pin_memory()
        if device is None and _default_is_device():
            device = "cuda"
        if not _names_device(device):
            return original(data, *args, device=device, **kwargs)
        requires_grad = kwargs.pop("requires_grad", False)
        if isinstance(data, torch.Tensor) and data.is_cuda:
            made = data if not (args or kwargs) else data.to(*args, **kwargs)
        else:
            # CUDA torch builds and moves the tensor with dispatch modes excluded and then
            # dispatches lift_fresh on the device tensor: a mode tracing the caller's ops
            # sees that one op, not the host build and the copy.
            with _simulator_mode_only():
                made = original(data, *args, device="cpu", **kwargs).to("cuda")
            made = torch.ops.aten.lift_fresh.default(made)
        return made.requires_grad_() if requires_grad else made

    return make


def _indexed(x: Any) -> Any:
    # torch fills a missing device index from the CUDA runtime, which CPU torch lacks.
    if (isinstance(x, str) and x.startswith("cuda")) or isinstance(x, torch.device):
        device = torch.device(x)
        if device.type == "cuda" and device.index is None:
            return torch.device("cuda", 0)
    return x


def _with_indexed_device(original: Callable[..., Any]) -> Callable[..., Any]:
    def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        args = tuple(_indexed(a) for a in args)
        if "device" in kwargs:
            kwargs["device"] = _indexed(kwargs["device"])
        return original(self, *args, **kwargs)

    return to


def _cuda(self: torch.Tensor, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
    if device is not None and not _names_device(device):
        raise RuntimeError(f"Invalid device, must be cuda device, got {device}")
    return self.to(torch.device("cuda", 0), non_blocking=non_blocking, **kwargs)


def _record_stream(self: torch.Tensor, stream: Any) -> None:
    # Work runs in issue order, so nothing is freed too early; the race detector is told
    # which streams may still use the memory when it is freed.
    races = state.require().races
    if races is not None:
        races.record_stream(self, stream)


def tensor_replacements() -> dict[str, Any]:
    """``torch.Tensor`` attribute name -> simulated replacement."""
    return {
        "record_stream": _record_stream,
        "to": _with_indexed_device(torch.Tensor.to),
        "cuda": _cuda,
    }


def _printed_from_host(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch._tensor_str._str``: torch prints with dispatch modes off, which a device
    tensor cannot survive, so print a host copy and name the device as CUDA does."""

    def _str(self: torch.Tensor, *, tensor_contents: Any = None) -> str:
        if not self.is_cuda:
            return original(self, tensor_contents=tensor_contents)
        with _simulator_mode_only():  # CUDA torch prints with every dispatch mode off
            host = self.detach().cpu()
        text = original(host, tensor_contents=tensor_contents)
        return f"{text[:-1]}, device='cuda:0')"

    return _str


def torch_replacements() -> dict[str, Any]:
    """``torch`` attribute name -> simulated replacement (built from the originals)."""
    return {
        "tensor": _built_on_host(torch.tensor),
        "as_tensor": _built_on_host(torch.as_tensor),
    }


def lazy_init() -> None:
    pass  # nothing to initialise; CPU torch calls this before it builds a CUDA tensor


def stream_capture_status(handle: int) -> str:
    """``cudaStreamGetCaptureInfo`` on the stream whose ``cuda_stream`` is ``handle``:
    ``"none"``, ``"active"``, or ``"invalidated"`` (a capture an illegal call broke)."""
    for capture in list(state.require().captures):
        for stream in list(capture.clocks):
            if stream.cuda_stream == handle and stream.capture is capture:
                return "invalidated" if capture.invalid else "active"
    return "none"
