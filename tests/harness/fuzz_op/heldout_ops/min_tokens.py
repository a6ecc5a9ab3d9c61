"""The min-tokens logits processor of vLLM's sampler: while a request has generated fewer
tokens (``output_lens``) than its ``min_tokens``, its stop token (id 0) cannot be sampled.
The decode loop calls it once per step."""

from __future__ import annotations

import torch

from verification import BreakOpSpec, TensorArg

EOS_TOKEN_ID = 0
_STEPS = [0]


def apply_min_tokens(
    logits: torch.Tensor, output_lens: torch.Tensor, min_tokens: torch.Tensor
) -> None:
    generated = output_lens + _STEPS[0]
    _STEPS[0] += 1
    blocked = generated < min_tokens
    logits[:, EOS_TOKEN_ID].masked_fill_(blocked, float("-inf"))


SPEC = BreakOpSpec(
    fn=apply_min_tokens,
    args={
        "logits": TensorArg(("batch", "vocab"), torch.float32),
        "output_lens": TensorArg(("batch",), torch.int32, low=0, high=4),
        "min_tokens": TensorArg(("batch",), torch.int32, low=0, high=4),
    },
    dims={"batch": (1, 8), "vocab": (2, 16)},
    inout=("logits",),
)
