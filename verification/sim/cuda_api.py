"""Simulated module-level ``torch.cuda`` functions and the ``torch.Tensor`` methods patched.

Device-to-host copies (``cpu``, ``to("cpu")``, ``tolist``, ``numpy``) raise on a capturing
stream with torch's pinned-memory error, which (as on a GPU) leaves the capture valid;
``cuda()`` and ``to("cuda")`` stay on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from verification.sim import cuda_errors, state
from verification.sim.streams import check_host_sync, current_stream


def synchronize(device: Any = None) -> None:
    check_host_sync(None, device_wide=True)


def empty_cache() -> None:
    session = state.require()
    session.allocator.release_unused(session.capturing_pools())


def memory_allocated(device: Any = None) -> int:
    return state.require().allocator.stats()[0]


def memory_reserved(device: Any = None) -> int:
    return state.require().allocator.stats()[1]


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
    # Not torch.manual_seed: that calls torch.cuda.manual_seed_all, i.e. back into us.
    torch.default_generator.manual_seed(int(seed))


def get_rng_state(device: Any = "cuda") -> torch.Tensor:
    return torch.default_generator.get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "cuda") -> None:
    torch.default_generator.set_state(new_state)


def _refuse_host_copy_while_capturing() -> None:
    if state.session is not None and current_stream().capture is not None:
        raise RuntimeError(cuda_errors.HOST_COPY)


def _device_to_host(original: Callable[..., Any]) -> Callable[..., Any]:
    def read_on_host(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        _refuse_host_copy_while_capturing()
        return original(self, *args, **kwargs)

    return read_on_host


def _is_host(x: Any) -> bool:
    return (isinstance(x, torch.device) and x.type == "cpu") or (
        isinstance(x, str) and x.startswith("cpu")
    )


def _cpu_device(x: Any) -> Any:
    if isinstance(x, torch.device) and x.type == "cuda":
        return torch.device("cpu")
    if isinstance(x, str) and x.startswith("cuda"):
        return "cpu"
    return x


def _to_cpu_instead(original: Callable[..., Any]) -> Callable[..., Any]:
    def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if any(_is_host(a) for a in (*args, kwargs.get("device"))):
            _refuse_host_copy_while_capturing()
        args = tuple(_cpu_device(a) for a in args)
        kwargs = {k: _cpu_device(v) for k, v in kwargs.items()}
        return original(self, *args, **kwargs)

    return to


def _stay_on_cpu(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    return self


def _record_stream(self: torch.Tensor, stream: Any) -> None:
    pass  # work runs in issue order, so nothing can be freed too early


def tensor_replacements() -> dict[str, Any]:
    """``torch.Tensor`` attribute name -> simulated replacement (built from the originals)."""
    return {
        "cpu": _device_to_host(torch.Tensor.cpu),
        "tolist": _device_to_host(torch.Tensor.tolist),
        "numpy": _device_to_host(torch.Tensor.numpy),
        "to": _to_cpu_instead(torch.Tensor.to),
        "cuda": _stay_on_cpu,
        "record_stream": _record_stream,
    }
