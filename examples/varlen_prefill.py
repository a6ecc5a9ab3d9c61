"""A packed varlen attention break op with ``cu_seqlens``, the argument every varlen kernel takes.

The batch's sequences are packed along one token axis; sequence ``i`` is the tokens
``cu_seqlens[i]:cu_seqlens[i+1]`` (int32, ``batch+1`` entries, the cumulative lengths). The
op reads the boundaries on the host (``.tolist()``), legal only in an eager break, and runs
causal attention within each sequence. Its spec sizes ``cu_seqlens`` with a dim expression,
``("batch+1",)``: ``python -m verification fuzz-op examples.varlen_prefill:SPEC``.
"""

from __future__ import annotations

import math

import torch

import breakable_cudagraph as bcg
from verification import BreakOpSpec, TensorArg


@bcg.eager_break_during_capture
def varlen_prefill(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor, out: torch.Tensor
) -> None:
    """``out[t]`` = causal attention of token ``t`` over the earlier tokens of its sequence;
    tokens in no sequence get zeros. ``q``, ``k``, ``v``, ``out``: (tokens, heads, dim)."""
    tokens = q.shape[0]
    out.zero_()
    start = 0
    # Boundaries are clamped and kept non-decreasing: at capture they are garbage, and the
    # op must not raise on them (a decreasing entry ends an empty sequence).
    for bound in cu_seqlens.tolist()[1:]:
        end = min(max(int(bound), start), tokens)
        if end > start:
            qs, ks, vs = (t[start:end].float().transpose(0, 1) for t in (q, k, v))
            scores = qs @ ks.transpose(1, 2) / math.sqrt(q.shape[-1])
            n = end - start
            future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
            weights = scores.masked_fill(future, -math.inf).softmax(-1)
            out[start:end] = (weights @ vs).transpose(0, 1).to(out.dtype)
        start = end


packed = TensorArg(("tokens", "heads", "dim"), (torch.float32, torch.float16))
same = TensorArg(("tokens", "heads", "dim"), "q")  # q's dtype
SPEC = BreakOpSpec(
    fn=varlen_prefill,
    args={
        "q": packed,
        "k": same,
        "v": same,
        # batch+1 boundaries, each a token index in [0, tokens].
        "cu_seqlens": TensorArg(("batch+1",), torch.int32, low=0, high="tokens"),
        "out": same,
    },
    dims={"batch": (1, 3), "tokens": (1, 8), "heads": (1, 2), "dim": (1, 4)},
    writes=("out",),
    rtol=1e-3,
    atol=1e-3,
)
