"""Resolves the user's device choice (``auto``, ``cuda``, ``sim``) to what will actually run.

``auto`` picks ``cuda`` when torch sees a GPU, else ``sim``. Asking for ``cuda`` on a
machine without one is a usage error (:class:`UsageError`), never a silent fallback.
:func:`device_context` then opens the resolved device: the GPU as is, or the simulator.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from verification.errors import UsageError

DEVICE_CHOICES = ("auto", "cuda", "sim")
# What tests allocate on for each resolved kind: the simulator's device tensors are
# ``cuda`` tensors too, so code written for a GPU runs unchanged on it.
TORCH_DEVICE = {"cuda": "cuda", "sim": "cuda"}


def resolve_device(choice: str) -> str:
    if choice not in DEVICE_CHOICES:
        raise UsageError(f"unknown device {choice!r}; choose one of {', '.join(DEVICE_CHOICES)}")
    if choice == "sim":
        return "sim"  # without asking CUDA anything: see hide_gpu
    # Imported here, not at the top: the pytest plugin imports this module in every host
    # project, and torch costs seconds there.
    import torch

    has_gpu = torch.cuda.is_available()
    if choice == "auto":
        return "cuda" if has_gpu else "sim"
    if choice == "cuda" and not has_gpu:
        raise UsageError("--device cuda was asked for but torch sees no GPU; use --device sim")
    return choice


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
def device_context(kind: str, strict_warmup: bool = True) -> Iterator[str]:
    """Yields the torch device to allocate on for a resolved ``kind``; ``sim`` holds the
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
