"""A dynamic per-token int8 quantization break op and its spec: the scale comes from a host read.

Each token (row of ``x``) is RMS-normalized, then quantized symmetrically to int8 with its
own scale, ``max |row| / 127``. The op reads the rows' maxima on the host (``.tolist()``),
legal only in an eager break, and writes the int8 result into ``out`` and the scales into
``scales``: ``python -m verification fuzz-op examples.dynamic_int8_quant:SPEC``.
"""

from __future__ import annotations

import torch

import breakable_cudagraph as bcg
from verification import BreakOpSpec, TensorArg


@bcg.eager_break_during_capture
def rms_norm_dynamic_int8(
    x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, scales: torch.Tensor
) -> None:
    """``out`` = round(rms_norm(x) * weight / scale) in int8, ``scales[t]`` = the token's scale."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()
    # NaN or inf (capture-time garbage) becomes a finite scale: the op must not raise then.
    amax = [a if a == a and a < float("inf") else 1.0 for a in h.abs().amax(-1).tolist()]
    scale = torch.tensor([max(a, 1e-8) / 127.0 for a in amax], device=x.device)[:, None]
    q = torch.nan_to_num(h / scale).round().clamp(-128, 127)
    out.copy_(q.to(torch.int8))
    scales.copy_(scale)


SPEC = BreakOpSpec(
    fn=rms_norm_dynamic_int8,
    args={
        "x": TensorArg(("tokens", "hidden"), (torch.float32, torch.bfloat16, torch.float16)),
        "weight": TensorArg(("hidden",), "x"),
        "out": TensorArg(("tokens", "hidden"), torch.int8),
        "scales": TensorArg(("tokens", 1), torch.float32),
    },
    dims={"tokens": (1, 8), "hidden": (1, 16)},
    writes=("out", "scales"),
)
