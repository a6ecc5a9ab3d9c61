"""Speculative decoding step that compacts the accepted draft tokens of all requests.

The target model's argmax is compared with each request's K draft tokens; the accepted
prefix of every request is compacted into one flat buffer by an eager break (its length
depends on the data), and the step then pools the embeddings of the accepted tokens into
the state that conditions the next draft.
"""

from __future__ import annotations

import torch

import breakable_cudagraph as bcg

B, K, D, V = 4, 4, 32, 16


@bcg.eager_break_during_capture
def compact_accepted(draft, accepted, flat_out):
    flat_out.resize_(0)  # reuse the buffer as an out= tensor
    torch.masked_select(draft, accepted, out=flat_out)


def build():
    def w(r, c):
        return torch.randn(r, c, device="cuda") / r**0.5

    embed, w1, lm_head, w_state = w(V, D), w(D, D), w(D, V), w(D, D)
    hidden = torch.randn(B, K, D, device="cuda")
    draft = torch.randint(0, V, (B, K), device="cuda")
    accepted_flat = torch.zeros(B * K, dtype=torch.long, device="cuda")

    def forward():
        logits = torch.tanh(hidden @ w1) @ lm_head
        target = logits.argmax(-1)
        accepted = (draft == target).long().cumprod(dim=1).bool()
        compact_accepted(draft, accepted, accepted_flat)
        pooled = embed[accepted_flat.clamp(0, V - 1)].sum(0)
        draft_state = torch.tanh(pooled @ w_state)
        return logits, draft_state

    def next_step(step: int) -> None:
        hidden.copy_(torch.randn(B, K, D, device="cuda"))
        guess = (torch.tanh(hidden @ w1) @ lm_head).argmax(-1)
        keep = torch.rand(B, K, device="cuda") < 0.7
        draft.copy_(torch.where(keep, guess, torch.randint(0, V, (B, K), device="cuda")))

    return forward, next_step
