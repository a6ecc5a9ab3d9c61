"""Decode step with a dynamic-NTK rotary embedding whose cos/sin cache grows with the context.

As in Hugging Face's dynamic rotary embedding, when the longest position nears the cached
length the runner recomputes the cos/sin cache for a longer context with a rescaled base;
the step gathers each token's row of the cache, rotates queries and keys, writes the key
cache and runs attention over each request's cached keys as an eager break.
"""

from __future__ import annotations

import torch

import breakable_cudagraph as bcg

B, D, V, HALF = 4, 32, 64, 16
BASE, ORIGINAL_LEN, MAX_CTX = 10000.0, 16, 64


def _cos_sin(length: int, device) -> torch.Tensor:
    scale = max(1.0, length / ORIGINAL_LEN)
    base = BASE * scale ** (D / (D - 2))
    inv_freq = 1.0 / base ** (torch.arange(0, D, 2, dtype=torch.float32) / D)
    freqs = torch.outer(torch.arange(length, dtype=torch.float32), inv_freq)
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).to(device)


def _rotate(x, cos, sin):
    x1, x2 = x[:, :HALF], x[:, HALF:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


@bcg.eager_break_during_capture
def attention(q, k_cache, v_cache, positions, out):
    for i, p in enumerate(positions.tolist()):
        n = max(1, min(int(p) + 1, MAX_CTX))  # capture-time data may be anything
        scores = (k_cache[i, :n] @ q[i]) / D**0.5
        out[i].copy_(scores.softmax(0) @ v_cache[i, :n])


def build():
    def w(r, c):
        return torch.randn(r, c, device="cuda") / r**0.5

    embed, wq, wk, wv, lm_head = w(V, D), w(D, D), w(D, D), w(D, D), w(D, V)
    k_cache = torch.randn(B, MAX_CTX, D, device="cuda")
    v_cache = torch.randn(B, MAX_CTX, D, device="cuda")
    lens = [2, 5, 1, 4]
    cached = [ORIGINAL_LEN]
    cos_sin = _cos_sin(ORIGINAL_LEN, "cuda")
    positions = torch.tensor(lens, device="cuda")
    ids = torch.randint(0, V, (B,), device="cuda")
    rows = torch.arange(B, device="cuda")
    attn_out = torch.empty(B, D, device="cuda")

    def forward():
        cs = cos_sin.index_select(0, positions)
        cos, sin = cs[:, :HALF], cs[:, HALF:]
        x = embed[ids]
        q, k = _rotate(x @ wq, cos, sin), _rotate(x @ wk, cos, sin)
        k_cache[rows, positions] = k
        v_cache[rows, positions] = x @ wv
        attention(q, k_cache, v_cache, positions, attn_out)
        return (x + attn_out) @ lm_head

    def next_step(step: int) -> None:
        ids.copy_(torch.randint(0, V, (B,), device="cuda"))
        for i in range(B):
            lens[i] = lens[i] + 1 if lens[i] + 1 < MAX_CTX else 0
        if max(lens) + 4 >= cached[0] and cached[0] < MAX_CTX:
            cached[0] *= 2
            cos_sin.resize_(cached[0], D)
            cos_sin.copy_(_cos_sin(cached[0], "cuda"))
        positions.copy_(torch.tensor(lens))

    return forward, next_step
