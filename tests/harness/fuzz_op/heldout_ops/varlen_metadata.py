"""Varlen attention metadata, as SGLang's and vLLM's flash-attention backends prepare it:
``cu_seqlens`` (the prefix sums of the sequence lengths, from 0) and ``max_seqlen``, which
the kernel launch takes as a host integer, so it is read on the host: an eager break."""

from __future__ import annotations

import torch

from verification import BreakOpSpec, TensorArg


def prepare_varlen_metadata(
    seq_lens: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: torch.Tensor
) -> None:
    lens = seq_lens.tolist()
    cu_seqlens[:1].zero_()
    cu_seqlens[1:].copy_(torch.cumsum(seq_lens, dim=0, dtype=torch.int32))
    max_seqlen.fill_(max(lens))


SPEC = BreakOpSpec(
    fn=prepare_varlen_metadata,
    args={
        "seq_lens": TensorArg(("batch",), torch.int32, low=1, high=64),
        "cu_seqlens": TensorArg(("batch+1",), torch.int32),
        "max_seqlen": TensorArg((1,), torch.int32),
    },
    dims={"batch": (1, 8)},
    writes=("cu_seqlens", "max_seqlen"),
)
