"""Decode step whose attention metadata builder stages lengths in a pinned buffer (vLLM style).

The runner keeps each request's length in host-side bookkeeping updated in place; the step
stages the lengths into a pinned host buffer through its numpy view, copies it to the device
non-blocking, derives slot mappings from the block table, writes the KV cache and runs paged
attention as an eager break.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

import breakable_cudagraph as bcg

B, D, V, BLOCK, MAX_BLOCKS = 4, 32, 64, 4, 6
NUM_BLOCKS = B * MAX_BLOCKS


@bcg.eager_break_during_capture
def paged_attention(q, k_cache, v_cache, block_table, seq_lens, out):
    table = block_table.tolist()
    for i, n in enumerate(seq_lens.tolist()):
        n = max(1, min(int(n), BLOCK * MAX_BLOCKS))  # capture-time data may be anything
        blocks = [max(0, min(int(b), NUM_BLOCKS - 1)) for b in table[i]]
        slots = torch.tensor([b * BLOCK + j for b in blocks for j in range(BLOCK)][:n])
        slots = slots.to(q.device)
        scores = (k_cache[slots] @ q[i]) / D**0.5
        out[i].copy_(scores.softmax(0) @ v_cache[slots])


def build():
    def w(r, c):
        return torch.randn(r, c, device="cuda") / r**0.5

    embed, wq, wk, wv, lm_head = w(V, D), w(D, D), w(D, D), w(D, D), w(D, V)
    k_cache = torch.randn(NUM_BLOCKS * BLOCK, D, device="cuda")
    v_cache = torch.randn(NUM_BLOCKS * BLOCK, D, device="cuda")
    block_table = torch.randperm(NUM_BLOCKS).view(B, MAX_BLOCKS).to("cuda")
    ids = torch.randint(0, V, (B,), device="cuda")
    seq_lens = torch.ones(B, dtype=torch.long, device="cuda")
    seq_lens_cpu = torch.ones(B, dtype=torch.long).pin_memory()
    seq_lens_np = seq_lens_cpu.numpy()
    attn_out = torch.empty(B, D, device="cuda")
    requests = SimpleNamespace(num_computed=[3, 7, 1, 5])

    def forward():
        seq_lens_np[:] = [n + 1 for n in requests.num_computed]
        seq_lens.copy_(seq_lens_cpu, non_blocking=True)
        positions = seq_lens - 1
        block = block_table.gather(1, (positions // BLOCK).unsqueeze(1)).squeeze(1)
        slot_mapping = block * BLOCK + positions % BLOCK
        x = embed[ids]
        q = x @ wq
        k_cache.index_copy_(0, slot_mapping, x @ wk)
        v_cache.index_copy_(0, slot_mapping, x @ wv)
        paged_attention(q, k_cache, v_cache, block_table, seq_lens, attn_out)
        return (x + attn_out) @ lm_head

    def next_step(step: int) -> None:
        ids.copy_(torch.randint(0, V, (B,), device="cuda"))
        done = requests.num_computed
        for i in range(B):
            done[i] = done[i] + 1 if done[i] + 2 < BLOCK * MAX_BLOCKS else (step + i) % 4

    return forward, next_step
