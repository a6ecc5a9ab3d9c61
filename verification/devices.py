"""Resolves the user's device choice (``auto``, ``cuda``, ``sim``) to the kind of machine that
will actually run, and opens it.

Three things are kept apart by name: the *device choice* is the user's string, the
:data:`DeviceKind` is what runs (a real GPU or the simulator), and a *device* is the torch
device that tensors are allocated on. :func:`resolve_kind` turns a choice into a kind, once,
where the user gave it: ``auto`` picks ``cuda`` when torch sees a GPU, else ``sim``; asking
for ``cuda`` on a machine without one is a usage error (:class:`UsageError`), never a silent
fallback. :func:`device_context` then opens the kind and yields the device.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Literal

from verification.errors import UsageError

# What runs: a real GPU, or the CUDA simulator standing in for one.
DeviceKind = Literal["cuda", "sim"]
DEVICE_CHOICES = ("auto", "cuda", "sim")
# What tests allocate on for each kind: the simulator's device tensors are ``cuda`` tensors
# too, so code written for a GPU runs unchanged on it.
TORCH_DEVICE: dict[DeviceKind, str] = {"cuda": "cuda", "sim": "cuda"}


def resolve_kind(device_choice: str) -> DeviceKind:
    """The kind that runs for the user's ``device_choice`` (one of :data:`DEVICE_CHOICES`)."""
    if device_choice not in DEVICE_CHOICES:
        raise UsageError(
            f"unknown device {device_choice!r}; choose one of {', '.join(DEVICE_CHOICES)}"
        )
    if device_choice == "sim":
        return "sim"  # without asking CUDA anything: see hide_gpu
    # Imported here, not at the top: the pytest plugin imports this module in every host
    # project, and torch costs seconds there.
    import torch

    has_gpu = torch.cuda.is_available()
    if device_choice == "auto":
        return "cuda" if has_gpu else "sim"
    if not has_gpu:
        raise UsageError("--device cuda was asked for but torch sees no GPU; use --device sim")
    return "cuda"


def hide_gpu() -> None:
    """Hides any real GPU from this process and its children, for a simulator run of the
    command line (never in a test process, where later tests may want the GPU).

    On a GPU host a simulator run must behave as on a CPU machine. Asking the CUDA runtime
    anything (even ``torch.cuda.is_available()``) initializes it, and a forked check then
    fails at its first real CUDA call with "initialization error" (so a ``certify --device
    sim`` on a GPU host would fail its forked checks). Hidden before the runtime starts,
    the GPU is never touched. Once torch has initialized CUDA it is too late, and harmless
    to try.
    """
    import os

    os.environ["CUDA_VISIBLE_DEVICES"] = ""


@contextlib.contextmanager
def device_context(kind: DeviceKind, strict_warmup: bool = True) -> Iterator[str]:
    """Yields the torch device to allocate on for ``kind``; ``sim`` holds the
    simulator open for the block (its device tensors are ``cuda`` tensors too), with the
    first-kernel-use rule on unless ``strict_warmup`` is False."""
    if kind == "cuda":
        yield TORCH_DEVICE[kind]
        return
    from verification.sim import simulated_cuda
    from verification.sim import strict_warmup as first_use_rule

    # The harness warms every program up eagerly before capturing it, as users must on a
    # GPU, so it runs with the first-kernel-use rule on.
    with simulated_cuda(), first_use_rule() if strict_warmup else contextlib.nullcontext():
        yield TORCH_DEVICE[kind]
