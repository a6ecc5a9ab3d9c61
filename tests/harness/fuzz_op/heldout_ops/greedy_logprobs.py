"""Greedy sampling with the sampled token's logprob, as an engine's sampler does it, on a
side stream of its own so that it can overlap other work (the stream is made once)."""

from __future__ import annotations

import torch

from verification import BreakOpSpec, TensorArg

_STREAMS: list[torch.cuda.Stream] = []


def _side_stream() -> torch.cuda.Stream:
    if not _STREAMS:
        _STREAMS.append(torch.cuda.Stream())
    return _STREAMS[0]


def greedy_sample_with_logprobs(
    logits: torch.Tensor, next_tokens: torch.Tensor, logprobs: torch.Tensor
) -> None:
    side = _side_stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        lp = torch.log_softmax(logits.float(), dim=-1)
        ids = lp.argmax(dim=-1)
        next_tokens.copy_(ids)
        logprobs.copy_(lp.gather(-1, ids.unsqueeze(-1)).squeeze(-1))
    torch.cuda.current_stream().wait_stream(side)


SPEC = BreakOpSpec(
    fn=greedy_sample_with_logprobs,
    args={
        "logits": TensorArg(("batch", "vocab"), (torch.float32, torch.bfloat16)),
        "next_tokens": TensorArg(("batch",), torch.int64),
        "logprobs": TensorArg(("batch",), torch.float32),
    },
    dims={"batch": (1, 8), "vocab": (2, 16)},
    writes=("next_tokens", "logprobs"),
    rtol=1e-5,
    atol=1e-5,
)
