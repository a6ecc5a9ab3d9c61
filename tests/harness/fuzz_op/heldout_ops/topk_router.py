"""MoE routing as vLLM's ``fused_topk`` does it: softmax over the gate, top-k experts per
token, weights optionally renormalized to sum to one."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from verification import BreakOpSpec, TensorArg


def fused_topk(
    gating_output: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    renormalize: bool,
) -> None:
    scores = torch.softmax(gating_output.float(), dim=-1)
    weights, ids = torch.topk(scores, topk_ids.shape[1], dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    topk_weights.copy_(weights)
    topk_ids.copy_(ids)


SPEC = BreakOpSpec(
    fn=fused_topk,
    args={
        "gating_output": TensorArg(("tokens", "experts"), (torch.float32, torch.bfloat16)),
        "topk_weights": TensorArg(("tokens", "topk"), torch.float32),
        "topk_ids": TensorArg(("tokens", "topk"), torch.int64),
    },
    dims={"tokens": (1, 8), "experts": (2, 8), "topk": (1, 2)},
    writes=("topk_weights", "topk_ids"),
    params={"renormalize": st.booleans()},
    rtol=1e-5,
    atol=1e-6,
)
