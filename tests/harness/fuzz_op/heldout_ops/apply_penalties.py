"""Sampler penalties as vLLM's ``apply_penalties``: repetition penalty on tokens seen in the
prompt or the output, then frequency and presence penalties from the output counts, applied
to the logits in place."""

from __future__ import annotations

import torch

from verification import BreakOpSpec, TensorArg


def apply_penalties(
    logits: torch.Tensor,
    prompt_mask: torch.Tensor,
    output_counts: torch.Tensor,
    repetition_penalties: torch.Tensor,
    frequency_penalties: torch.Tensor,
    presence_penalties: torch.Tensor,
) -> None:
    output_mask = output_counts > 0
    seen = prompt_mask | output_mask
    rep = repetition_penalties.unsqueeze(1).to(logits.dtype)
    penalized = torch.where(logits > 0, logits / rep, logits * rep)
    result = torch.where(seen, penalized, logits)
    result = result - frequency_penalties.unsqueeze(1) * output_counts.to(logits.dtype)
    result = result - presence_penalties.unsqueeze(1) * output_mask.to(logits.dtype)
    logits.copy_(result)


SPEC = BreakOpSpec(
    fn=apply_penalties,
    args={
        "logits": TensorArg(("batch", "vocab"), torch.float32),
        "prompt_mask": TensorArg(("batch", "vocab"), torch.bool),
        "output_counts": TensorArg(("batch", "vocab"), torch.int32, low=0, high=3),
        "repetition_penalties": TensorArg(("batch",), torch.float32, low=1.0, high=2.0),
        "frequency_penalties": TensorArg(("batch",), torch.float32, low=-1.0, high=1.0),
        "presence_penalties": TensorArg(("batch",), torch.float32, low=-1.0, high=1.0),
    },
    dims={"batch": (1, 6), "vocab": (1, 16)},
    inout=("logits",),
    rtol=1e-5,
    atol=1e-5,
)
