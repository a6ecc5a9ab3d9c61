"""Greedy decode step with a no-repeat-bigram logits processor (Hugging Face's, vectorised).

A token is banned when it would complete a bigram already in the request's recent history.
The history window is a static device tensor the runner refills before each step from the
tokens generated so far; with asynchronous scheduling the runner keeps the previous step's
sampled-token tensor to append it.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

import breakable_cudagraph as bcg

B, D, V, WINDOW = 4, 32, 16, 6


@bcg.eager_break_during_capture
def rms_norm(x, out):
    out.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def build():
    def w(r, c):
        return torch.randn(r, c, device="cuda") / r**0.5

    embed, w1, lm_head = w(V, D), w(D, D), w(D, V)
    history = torch.randint(0, V, (B, WINDOW), device="cuda")
    hidden = torch.randn(B, D, device="cuda")
    normed = torch.empty(B, D, device="cuda")
    vocab = torch.arange(V, device="cuda")
    state = SimpleNamespace(prev_sampled=None, generated=list(history.unbind(1)))

    def forward():
        x = hidden + embed[history[:, -1].clamp(0, V - 1)]
        rms_norm(x @ w1, normed)
        logits = normed @ lm_head
        # tokens that followed an earlier occurrence of the last token
        match = history[:, :-1] == history[:, -1:]
        followers = torch.where(match, history[:, 1:], -1)
        banned = (followers.unsqueeze(-1) == vocab).any(dim=1)
        logits = logits.masked_fill(banned, -float("inf"))
        sampled = logits.argmax(-1)
        state.prev_sampled = sampled
        return logits, sampled

    def next_step(step: int) -> None:
        hidden.copy_(torch.randn(B, D, device="cuda"))
        if step > 0:  # step 0 follows the start-up runs, whose samples belong to no request
            state.generated.append(state.prev_sampled)
        history.copy_(torch.stack(state.generated[-WINDOW:], dim=1))

    return forward, next_step
