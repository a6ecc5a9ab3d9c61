"""Greedy decode step with a stop-string check on the detokenised token (as stopping criteria do).

The step samples one token per request; an eager break looks up each token's text in the
tokenizer's vocabulary and marks the request finished when the text is one of its stop
strings. The runner copies new hidden states into the static input before each step.
"""

from __future__ import annotations

import torch

import breakable_cudagraph as bcg

B, D = 4, 32
VOCAB = ["<eos>", "the", "a", "cat", ".", "\n", "sat", "on", "mat", "!", "dog", "ran", "END", "and", "it", "?"]
V = len(VOCAB)
STOP = {".", "END", "\n"}


@bcg.eager_break_during_capture
def check_stop_strings(tokens, finished):
    texts = [VOCAB[t] for t in tokens.tolist()]
    finished.copy_(torch.tensor([text in STOP for text in texts], device=finished.device))


@bcg.eager_break_during_capture
def rms_norm(x, out):
    out.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def build():
    w1 = torch.randn(D, D, device="cuda") / D**0.5
    lm_head = torch.randn(D, V, device="cuda") / D**0.5
    hidden = torch.randn(B, D, device="cuda")
    normed = torch.empty(B, D, device="cuda")
    finished = torch.zeros(B, dtype=torch.bool, device="cuda")

    def forward():
        rms_norm(torch.relu(hidden @ w1), normed)
        logits = normed @ lm_head
        tokens = logits.argmax(-1)
        check_stop_strings(tokens, finished)
        return logits, tokens, finished

    def next_step(step: int) -> None:
        hidden.copy_(torch.randn(B, D, device="cuda"))

    return forward, next_step
