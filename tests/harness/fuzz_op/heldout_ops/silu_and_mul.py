"""SwiGLU activation as vLLM's ``silu_and_mul``: ``out = silu(x[:, :d]) * x[:, d:]`` for
``x`` of width ``2 * d``. The kernel walks each row from a base pointer and a row pitch,
as a CUDA kernel launched with (pointer, rows, width) does."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from verification import BreakOpSpec, TensorArg


def _rows(base: torch.Tensor, rows: int, width: int, pitch: int) -> torch.Tensor:
    """The (rows, width) matrix a kernel sees from ``base``'s first element."""
    return torch.as_strided(base, (rows, width), (pitch, 1), base.storage_offset())


def silu_and_mul(x: torch.Tensor, out: torch.Tensor) -> None:
    rows, width = x.shape
    d = width // 2
    gate_up = _rows(x, rows, width, width)
    out.copy_(F.silu(gate_up[:, :d].float()) * gate_up[:, d:].float())


SPEC = BreakOpSpec(
    fn=silu_and_mul,
    args={
        "x": TensorArg(("tokens", "2*d"), (torch.float32, torch.bfloat16)),
        "out": TensorArg(("tokens", "d"), "x"),
    },
    dims={"tokens": (1, 8), "d": (1, 8)},
    writes=("out",),
    rtol=1e-5,
    atol=1e-5,
)
