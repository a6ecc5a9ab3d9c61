"""Varlen attention metadata (``cu_seqlens``, host ``max_seqlen``) as in SGLang's
flash-attention backend, skipping the device-to-host read of the lengths when the lengths
tensor has not been modified since the last call."""

from __future__ import annotations

import torch

from verification import BreakOpSpec, TensorArg

_LAST: dict[str, tuple[torch.Tensor, int, list[int]]] = {}


def _host_lengths(seq_lens: torch.Tensor) -> list[int]:
    last = _LAST.get("lens")
    if last is None or last[0] is not seq_lens or last[1] != seq_lens._version:
        last = (seq_lens, seq_lens._version, seq_lens.tolist())
        _LAST["lens"] = last
    return last[2]


def prepare_varlen_metadata(
    seq_lens: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: torch.Tensor
) -> None:
    lens = _host_lengths(seq_lens)
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
