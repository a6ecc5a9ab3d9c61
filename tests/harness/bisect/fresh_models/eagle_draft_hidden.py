"""One step of EAGLE-style speculative decoding: a target block and a draft head.

The draft head fuses the embedding of the current token with the target model's hidden
state of the previous step, as EAGLE's proposer does, and proposes the next draft token.
The runner copies new token ids into the static input before each step.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

import breakable_cudagraph as bcg

B, D, V = 4, 32, 64


@bcg.eager_break_during_capture
def rms_norm(x, out):
    out.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def build():
    def w(r, c):
        return torch.randn(r, c, device="cuda") / r**0.5

    embed, w_up, w_down, lm_head = w(V, D), w(D, 2 * D), w(2 * D, D), w(D, V)
    w_fuse, w_draft = w(2 * D, D), w(D, D)
    ids = torch.randint(0, V, (B,), device="cuda")
    normed = torch.empty(B, D, device="cuda")
    state = SimpleNamespace(prev_hidden=torch.zeros(B, D, device="cuda"))

    def forward():
        x = embed[ids]
        rms_norm(x, normed)
        hidden = x + torch.relu(normed @ w_up) @ w_down
        target_logits = hidden @ lm_head
        fused = torch.cat([x, state.prev_hidden], dim=-1) @ w_fuse
        draft_logits = torch.tanh(fused @ w_draft) @ lm_head
        state.prev_hidden = hidden
        return target_logits, draft_logits

    def next_step(step: int) -> None:
        ids.copy_(torch.randint(0, V, (B,), device="cuda"))

    return forward, next_step
