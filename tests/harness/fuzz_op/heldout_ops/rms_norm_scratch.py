"""RMS norm as vLLM's ``rms_norm`` computes it, through a scratch buffer kept per element
count so that the decode loop does not allocate on every call."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from verification import BreakOpSpec, TensorArg

_SCRATCH: dict[tuple[int, str], torch.Tensor] = {}


def _scratch(like: torch.Tensor) -> torch.Tensor:
    key = (like.numel(), str(like.device))
    if key not in _SCRATCH:
        _SCRATCH[key] = torch.empty(like.numel(), dtype=like.dtype, device=like.device)
    return _SCRATCH[key].view(like.shape)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, *, eps: float) -> None:
    h = _scratch(x)
    h.copy_(x)
    variance = h.pow(2).mean(dim=-1, keepdim=True)
    h.mul_(torch.rsqrt(variance + eps))
    out.copy_(h * weight)


SPEC = BreakOpSpec(
    fn=rms_norm,
    args={
        "x": TensorArg(("tokens", "hidden"), (torch.float32, torch.bfloat16)),
        "weight": TensorArg(("hidden",), "x"),
        "out": TensorArg(("tokens", "hidden"), "x"),
    },
    dims={"tokens": (1, 8), "hidden": (2, 16)},
    writes=("out",),
    params={"eps": st.sampled_from([1e-6, 1e-5])},
    rtol=1e-5,
    atol=1e-5,
)
