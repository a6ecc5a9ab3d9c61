"""Decode step with a LoRA adapter on the output projection, switched by the runner between steps.

The step applies ``x @ W + scale * (x @ A) @ B`` with the active adapter's A and B; the runner
activates another adapter from its host-side registry before a step when the scheduled
requests ask for it. Attention-free: a normalisation runs as an eager break.
"""

from __future__ import annotations

import torch

import breakable_cudagraph as bcg

B, D, V, RANK, ADAPTERS = 4, 32, 64, 4, 3


@bcg.eager_break_during_capture
def rms_norm(x, out):
    out.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def build():
    def w(r, c):
        return torch.randn(r, c, device="cuda") / r**0.5

    embed, w_o, lm_head = w(V, D), w(D, D), w(D, V)
    registry = [(w(D, RANK), w(RANK, D)) for _ in range(ADAPTERS)]
    lora_a = registry[0][0].clone()
    lora_b = registry[0][1].clone()
    scale = 2.0
    ids = torch.randint(0, V, (B,), device="cuda")
    normed = torch.empty(B, D, device="cuda")

    def forward():
        x = embed[ids]
        rms_norm(x, normed)
        h = normed @ w_o + scale * ((normed @ lora_a) @ lora_b)
        return (x + h) @ lm_head

    def next_step(step: int) -> None:
        ids.copy_(torch.randint(0, V, (B,), device="cuda"))
        if step % 4 == 3:  # the next batch's requests use another adapter
            a, b = registry[(step // 4 + 1) % ADAPTERS]
            lora_a.data = a.clone()
            lora_b.data = b.clone()

    return forward, next_step
