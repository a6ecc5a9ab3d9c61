"""One decode step's input update, as vLLM's ``advance_step_flashattn``: the sampled token
becomes the next input, its position is the old sequence length, the length grows by one
and the token's KV slot comes from the block table (block size 4)."""

from __future__ import annotations

import torch

from verification import BreakOpSpec, TensorArg

BLOCK_SIZE = 4


def advance_step(
    sampled_token_ids: torch.Tensor,
    block_tables: torch.Tensor,
    input_tokens: torch.Tensor,
    input_positions: torch.Tensor,
    seq_lens: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    input_tokens.copy_(sampled_token_ids[:, 0])
    positions = seq_lens.long()
    input_positions.copy_(positions)
    seq_lens.add_(1)
    # Lengths are garbage at capture: keep the block index inside the table.
    block_index = (positions // BLOCK_SIZE).clamp(0, block_tables.shape[1] - 1)
    block = block_tables.gather(1, block_index.unsqueeze(1)).squeeze(1).long()
    slot_mapping.copy_(block * BLOCK_SIZE + positions % BLOCK_SIZE)


SPEC = BreakOpSpec(
    fn=advance_step,
    args={
        "sampled_token_ids": TensorArg(("batch", 1), torch.int64),
        "block_tables": TensorArg(("batch", "max_blocks"), torch.int32, low=0, high=15),
        "input_tokens": TensorArg(("batch",), torch.int64),
        "input_positions": TensorArg(("batch",), torch.int64),
        "seq_lens": TensorArg(("batch",), torch.int32, low=1, high="4*max_blocks-1"),
        "slot_mapping": TensorArg(("batch",), torch.int64),
    },
    dims={"batch": (1, 8), "max_blocks": (1, 4)},
    writes=("input_tokens", "input_positions", "slot_mapping"),
    inout=("seq_lens",),
)
