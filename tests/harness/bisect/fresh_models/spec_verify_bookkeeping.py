"""Verification step of speculative decoding with greedy acceptance and a bonus token.

The target model scores each request's K draft tokens in one pass; a draft token is accepted
while it matches the target's argmax, and the target's token after the last accepted one is
the bonus token. The scheduler's per-request computed-token counts are advanced by an eager
break (it reads the acceptance counts on the host), and positions of the next step derive
from them on the device.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

import breakable_cudagraph as bcg

B, K, D, V, MAX_POS = 4, 3, 32, 64, 4096


@bcg.eager_break_during_capture
def advance_requests(num_accepted, scheduler, num_computed):
    for i, n in enumerate(num_accepted.tolist()):
        n = max(0, min(int(n), K))  # capture-time data may be anything
        scheduler.computed[i] = (scheduler.computed[i] + n + 1) % MAX_POS
    num_computed.copy_(torch.tensor(scheduler.computed, device=num_computed.device))


def build():
    def w(r, c):
        return torch.randn(r, c, device="cuda") / r**0.5

    embed, pos_embed, w1, lm_head = w(V, D), w(MAX_POS, D), w(D, D), w(D, V)
    draft = torch.randint(0, V, (B, K), device="cuda")
    context = torch.randint(0, V, (B,), device="cuda")
    scheduler = SimpleNamespace(computed=[5, 17, 2, 40])
    num_computed = torch.tensor(scheduler.computed, device="cuda")
    offsets = torch.arange(K + 1, device="cuda")

    def forward():
        tokens = torch.cat([context.unsqueeze(1), draft], dim=1)
        positions = num_computed.unsqueeze(1) + offsets
        h = embed[tokens] + pos_embed[positions]
        logits = torch.tanh(h @ w1) @ lm_head
        target = logits.argmax(-1)
        matches = (draft == target[:, :K]).long()
        num_accepted = matches.cumprod(dim=1).sum(dim=1)
        bonus = target.gather(1, num_accepted.unsqueeze(1)).squeeze(1)
        advance_requests(num_accepted, scheduler, num_computed)
        return logits, num_accepted, bonus

    def next_step(step: int) -> None:
        context.copy_(torch.randint(0, V, (B,), device="cuda"))
        draft.copy_(torch.randint(0, V, (B, K), device="cuda"))
        # Some drafts copy the target's guess so that acceptance varies.
        draft[:, 0] = torch.randint(0, 2, (B,), device="cuda")

    return forward, next_step
