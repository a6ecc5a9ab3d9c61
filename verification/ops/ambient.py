"""How a program calls a break: under what ambient state, and with what on its tensors.

A break step may be called inside a ``with`` block of the region (:data:`AMBIENT`: autocast,
no_grad, inference mode, a default dtype, an attention-backend choice, each as the expression
a model writes), and its tensor arguments may carry Python attributes (:data:`TAG`, as
structured-output code tags its logits; each a view of its own). :data:`AMBIENT_SOURCE` and
:data:`TAGGED_SOURCE` are standalone Python text, run by the executor and printed in
reproducers: the ``default_dtype`` block, ``ambient_seen()`` (what a break can read of the
state it runs under) and ``tagged(t)``. The break log records what each call saw, so a replay
that calls a break under other state than eager did is seen whatever the break computes.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

AMBIENT_SOURCE = '''
import contextlib


@contextlib.contextmanager
def default_dtype(dtype):
    """torch.set_default_dtype for the length of a block."""
    was = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(was)


def ambient_seen():
    """What a break can read of the state it is called under."""

    def autocast(device):
        on = torch.is_autocast_enabled(device)
        return str(torch.get_autocast_dtype(device)) if on else "off"

    modes = torch.overrides._get_current_function_mode_stack()
    return (
        ("grad mode", torch.is_grad_enabled()),
        ("inference mode", torch.is_inference_mode_enabled()),
        ("autocast cuda", autocast("cuda")),
        ("autocast cpu", autocast("cpu")),
        ("default dtype", str(torch.get_default_dtype())),
        ("flash attention", torch.backends.cuda.flash_sdp_enabled()),
        ("function modes", tuple(type(m).__name__ for m in modes)),
    )
'''

# Each way a region sets ambient state around one break call, as the model writes it. Chosen
# to change what a break reads without changing what the catalog's ops compute, so that the
# program drawn stays valid under each. Autocast for the device is not among them: the
# catalog's breaks compute in float64 inside (``shrink_pair_``), where torch's CUDA autocast
# raises ("Unexpected floating ScalarType"), which checks that run no eager reference first
# took for a target's failure; CPU autocast changes the state a break reads all the same.
AMBIENT: dict[str, str] = {
    "autocast_cpu": 'torch.autocast("cpu", dtype=torch.bfloat16)',
    "no_grad": "torch.no_grad()",
    "inference_mode": "torch.inference_mode()",
    "default_dtype": "default_dtype(torch.float64)",
    "sdpa_math": "torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH)",
}

# The attribute a tagged step sets on each tensor it hands a break, and its value.
TAG = ("bcg_tag", "tagged")
TAGGED_SOURCE = f'''
def tagged(t):
    """A view of t carrying a Python attribute, as structured-output code tags its logits: a
    fresh object per call, so that a value handed to several steps carries the attribute only
    where a step tagged it."""
    view = t.view(t.shape)
    view.{TAG[0]} = {TAG[1]!r}
    return view
'''


@functools.cache
def _namespace() -> dict[str, Any]:
    namespace: dict[str, Any] = {"torch": torch}
    exec(compile(AMBIENT_SOURCE + TAGGED_SOURCE, "<ambient>", "exec"), namespace)
    return namespace


@functools.cache
def _context_code(name: str) -> Any:
    return compile(AMBIENT[name], f"<ambient {name}>", "eval")


def ambient_context(name: str) -> Any:
    """A fresh context manager for the way ``name`` of :data:`AMBIENT`."""
    return eval(_context_code(name), _namespace())


def ambient_seen() -> tuple[tuple[str, Any], ...]:
    """What a break called now can read of its ambient state (``AMBIENT_SOURCE``'s)."""
    return _namespace()["ambient_seen"]()


def tagged(tensor: torch.Tensor) -> torch.Tensor:
    """A view of ``tensor`` carrying :data:`TAG` (``TAGGED_SOURCE``'s)."""
    return _namespace()["tagged"](tensor)


def seen_difference(
    replay: tuple[tuple[str, Any], ...], eager: tuple[tuple[str, Any], ...]
) -> str | None:
    """The items of ``replay`` that ``eager`` does not share, in words, or None."""
    words = [
        f"{name} {got!r} where eager had {want!r}"
        for (name, got), (_, want) in zip(replay, eager)
        if got != want
    ]
    return ", ".join(words) or None
