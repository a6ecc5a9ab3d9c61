"""Speculative decoding's rejection sampler, vectorised on the device (as vLLM's sampler does).

Each request proposes K draft tokens with the draft model's probabilities; the target
model's probabilities accept a draft token with probability min(1, p_target / p_draft), the
first rejected position is resampled from the normalised residual, and a bonus token is
drawn when all K are accepted. Random draws use the device generator inside the step.
"""

from __future__ import annotations

import torch

import breakable_cudagraph as bcg

B, K, D, V = 4, 3, 32, 32


@bcg.eager_break_during_capture
def rms_norm(x, out):
    out.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def _sample(probs):
    # Gumbel-style sampling: argmax of p / Exp(1), as vLLM's random sampler does.
    q = torch.empty_like(probs).exponential_()
    return probs.div(q).argmax(-1)


def build():
    def w(r, c):
        return torch.randn(r, c, device="cuda") / r**0.5

    w_target, w_draft, lm_head = w(D, D), w(D, D), w(D, V)
    hidden = torch.randn(B, K + 1, D, device="cuda")
    draft_tokens = torch.randint(0, V, (B, K), device="cuda")
    normed = torch.empty(B, K + 1, D, device="cuda")
    positions = torch.arange(K + 1, device="cuda")

    def forward():
        rms_norm(hidden, normed)
        target_probs = (torch.tanh(normed @ w_target) @ lm_head).softmax(-1)
        draft_probs = (torch.tanh(normed[:, :K] @ w_draft) @ lm_head).softmax(-1)
        idx = draft_tokens.unsqueeze(-1)
        p_t = target_probs[:, :K].gather(-1, idx).squeeze(-1)
        p_d = draft_probs.gather(-1, idx).squeeze(-1)
        u = torch.rand(B, K, device="cuda")
        accepted = (u * p_d <= p_t).long().cumprod(dim=1)
        num_accepted = accepted.sum(1)
        residual = (target_probs[:, :K] - draft_probs).clamp(min=0)
        residual = residual / residual.sum(-1, keepdim=True).clamp(min=1e-9)
        recovered = _sample(residual)
        bonus = _sample(target_probs[:, K])
        out = torch.cat([draft_tokens, bonus.unsqueeze(1)], dim=1)
        recovered = torch.cat([recovered, bonus.unsqueeze(1)], dim=1)
        at_reject = positions == num_accepted.unsqueeze(1)
        out = torch.where(at_reject, recovered, out)
        out = out.masked_fill(positions > num_accepted.unsqueeze(1), -1)
        return out, num_accepted

    def next_step(step: int) -> None:
        hidden.copy_(torch.randn(B, K + 1, D, device="cuda"))
        draft_tokens.copy_(torch.randint(0, V, (B, K), device="cuda"))

    return forward, next_step
