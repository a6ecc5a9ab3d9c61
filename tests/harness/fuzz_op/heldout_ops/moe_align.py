"""MoE token alignment as vLLM's ``moe_align_block_size``: token indices grouped by expert,
each expert's group padded to a multiple of the block size (pad value: the token count),
the expert of each block, and the padded total. Four experts, blocks of four; the expert
ids are read on the host (an eager break). Each token takes the next free place in its
expert's group as it is reached, as the kernel's per-expert counters hand them out."""

from __future__ import annotations

import random

import torch

from verification import BreakOpSpec, TensorArg

NUM_EXPERTS = 4
BLOCK_SIZE = 4


def moe_align_block_size(
    topk_ids: torch.Tensor,
    sorted_token_ids: torch.Tensor,
    expert_ids: torch.Tensor,
    num_tokens_post_pad: torch.Tensor,
) -> None:
    ids = topk_ids.tolist()
    groups: list[list[int]] = [[] for _ in range(NUM_EXPERTS)]
    reached = list(range(len(ids)))
    random.shuffle(reached)  # the order the kernel's threads reach their tokens
    for token in reached:
        if 0 <= ids[token] < NUM_EXPERTS:  # garbage at capture: skipped
            groups[ids[token]].append(token)
    sorted_ids = [len(ids)] * sorted_token_ids.numel()
    experts = [-1] * expert_ids.numel()
    position = 0
    for expert, group in enumerate(groups):
        padded = -(-len(group) // BLOCK_SIZE) * BLOCK_SIZE
        sorted_ids[position : position + len(group)] = group
        for block in range(position // BLOCK_SIZE, (position + padded) // BLOCK_SIZE):
            experts[block] = expert
        position += padded
    device = topk_ids.device
    sorted_token_ids.copy_(torch.tensor(sorted_ids, dtype=torch.int32, device=device))
    expert_ids.copy_(torch.tensor(experts, dtype=torch.int32, device=device))
    num_tokens_post_pad.fill_(position)


SPEC = BreakOpSpec(
    fn=moe_align_block_size,
    args={
        "topk_ids": TensorArg(("tokens",), torch.int32, low=0, high=NUM_EXPERTS - 1),
        # At most BLOCK_SIZE-1 padding per expert.
        "sorted_token_ids": TensorArg(("tokens+12",), torch.int32),
        "expert_ids": TensorArg(("(tokens+12)//4",), torch.int32),
        "num_tokens_post_pad": TensorArg((1,), torch.int32),
    },
    dims={"tokens": (1, 8)},
    writes=("sorted_token_ids", "expert_ids", "num_tokens_post_pad"),
)
