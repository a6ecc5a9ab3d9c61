"""Which GPU a pytest-xdist worker runs on: worker ``gwI`` takes visible GPU ``I mod n``.

The choice is made in the controller, which may touch CUDA, and applied in the worker as
``CUDA_VISIBLE_DEVICES`` before anything there initialises CUDA; see :mod:`verification.plugin.hooks`.
"""

from __future__ import annotations

from collections.abc import Mapping


def visible_gpus(environ: Mapping[str, str], device_count: int) -> list[str]:
    """The GPUs this process may hand out, in ``CUDA_VISIBLE_DEVICES`` notation.

    An existing ``CUDA_VISIBLE_DEVICES`` (indices or UUIDs) is respected: workers are
    spread over that list, never over GPUs the user hid.
    """
    given = environ.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        return [entry.strip() for entry in given.split(",") if entry.strip()]
    return [str(index) for index in range(device_count)]


def worker_index(worker_id: str) -> int:
    """``"gw3"`` -> 3 (xdist's worker ids)."""
    digits = worker_id.removeprefix("gw")
    if not digits.isdigit():
        raise ValueError(f"not a pytest-xdist worker id: {worker_id!r}")
    return int(digits)


def gpu_for_worker(worker_id: str, gpus: list[str]) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` value for one worker: one GPU, round robin."""
    return gpus[worker_index(worker_id) % len(gpus)]
