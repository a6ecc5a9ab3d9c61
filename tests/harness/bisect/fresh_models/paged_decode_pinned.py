"""Paged-attention decode step in the style of vLLM's model runner (pinned host staging).

Per-request sequence lengths and input ids live in pinned host buffers that the runner
refills in place before each step; the forward copies them to the device with non-blocking
copies, derives positions and slot mappings from the block table, writes the KV cache, runs
paged attention as an eager break and copies the sampled tokens back to a pinned host buffer.
"""

from __future__ import annotations

import torch

import breakable_cudagraph as bcg

B, D, V, BLOCK, MAX_BLOCKS = 4, 32, 64, 4, 8
NUM_BLOCKS = B * MAX_BLOCKS


@bcg.eager_break_during_capture
def paged_attention(q, k_cache, v_cache, block_table, seq_lens, out):
    lens = seq_lens.tolist()
    table = block_table.tolist()
    for i, n in enumerate(lens):
        n = max(1, min(int(n), BLOCK * MAX_BLOCKS))  # capture-time data may be anything
        blocks = [max(0, min(int(b), NUM_BLOCKS - 1)) for b in table[i][: (n + BLOCK - 1) // BLOCK]]
        slots = torch.tensor(
            [b * BLOCK + j for b in blocks for j in range(BLOCK)][:n], device=q.device
        )
        k, v = k_cache[slots], v_cache[slots]
        scores = (k @ q[i]) / D**0.5
        out[i].copy_(scores.softmax(0) @ v)


def build():
    def w(r, c):
        return torch.randn(r, c, device="cuda") / r**0.5

    embed, wq, wk, wv, wo, lm_head = w(V, D), w(D, D), w(D, D), w(D, D), w(D, D), w(D, V)
    k_cache = torch.zeros(NUM_BLOCKS * BLOCK, D, device="cuda")
    v_cache = torch.zeros(NUM_BLOCKS * BLOCK, D, device="cuda")
    # Each request owns a fixed row of blocks, shuffled so that slots are not contiguous.
    perm = torch.randperm(NUM_BLOCKS)
    block_table = perm.view(B, MAX_BLOCKS).to("cuda")
    seq_lens = torch.ones(B, dtype=torch.long, device="cuda")
    ids = torch.zeros(B, dtype=torch.long, device="cuda")
    attn_out = torch.empty(B, D, device="cuda")
    # Pinned host staging buffers, refilled in place by the runner.
    seq_lens_cpu = torch.ones(B, dtype=torch.long).pin_memory()
    ids_cpu = torch.randint(0, V, (B,)).pin_memory()
    sampled_cpu = torch.zeros(B, dtype=torch.long).pin_memory()
    host = {"lens": [1] * B}

    def forward():
        seq_lens.copy_(seq_lens_cpu, non_blocking=True)
        ids.copy_(ids_cpu, non_blocking=True)
        positions = seq_lens - 1
        block = block_table.gather(1, (positions // BLOCK).unsqueeze(1)).squeeze(1)
        slot_mapping = block * BLOCK + positions % BLOCK
        x = embed[ids]
        q, k, v = x @ wq, x @ wk, x @ wv
        k_cache.index_copy_(0, slot_mapping, k)
        v_cache.index_copy_(0, slot_mapping, v)
        paged_attention(q, k_cache, v_cache, block_table, seq_lens, attn_out)
        h = x + attn_out @ wo
        logits = h @ lm_head
        sampled = logits.argmax(-1)
        sampled_cpu.copy_(sampled, non_blocking=True)
        return logits, sampled

    def next_step(step: int) -> None:
        torch.cuda.synchronize()  # the previous step's sampled tokens are on the host now
        lens = host["lens"]
        for i in range(B):
            lens[i] += 1
            if lens[i] > BLOCK * MAX_BLOCKS or (step + i) % 7 == 6:
                lens[i] = 1 + (step * 3 + i) % 5  # a new request takes the slot
        seq_lens_cpu.copy_(torch.tensor(lens))
        ids_cpu.copy_(sampled_cpu)

    return forward, next_step
