"""A decode step's sampler in the style of vLLM's: penalties, min-tokens, top-k/top-p, stop check.

Repetition, frequency and presence penalties read per-request output token counts kept on the
device and updated by the step itself; min-tokens masks EOS; top-k and top-p use per-request
device tensors; a stop check runs as an eager break. The runner refills per-request
parameters in place when a request slot is reused.
"""

from __future__ import annotations

import torch

import breakable_cudagraph as bcg

B, D, V, EOS = 4, 32, 64, 0


@bcg.eager_break_during_capture
def stop_check(tokens, num_generated, max_tokens, finished):
    toks = tokens.tolist()
    made = num_generated.tolist()
    limit = max_tokens.tolist()
    done = [int(t) == EOS or int(n) >= int(m) for t, n, m in zip(toks, made, limit)]
    finished.copy_(torch.tensor(done, device=finished.device))


def _apply_top_k_top_p(logits, k, p):
    logits_sort, logits_idx = logits.sort(dim=-1, descending=False)
    kth = logits_sort.size(1) - k.to(torch.long)
    threshold = logits_sort.gather(1, kth.unsqueeze(1))
    logits_sort.masked_fill_(logits_sort < threshold, -float("inf"))
    probs_sort = logits_sort.softmax(dim=-1)
    probs_sum = probs_sort.cumsum(dim=-1)
    top_p_mask = probs_sum <= 1 - p.unsqueeze(1)
    top_p_mask[:, -1] = False
    logits_sort.masked_fill_(top_p_mask, -float("inf"))
    return logits_sort.scatter(1, logits_idx, logits_sort)


def build():
    lm_head = torch.randn(D, V, device="cuda") / D**0.5
    hidden = torch.randn(B, D, device="cuda")
    output_counts = torch.zeros(B, V, dtype=torch.long, device="cuda")
    prompt_mask = torch.rand(B, V, device="cuda") < 0.1
    rep_pen = torch.full((B,), 1.2, device="cuda")
    freq_pen = torch.full((B,), 0.1, device="cuda")
    pres_pen = torch.full((B,), 0.2, device="cuda")
    top_k = torch.full((B,), 10, dtype=torch.long, device="cuda")
    top_p = torch.full((B,), 0.9, device="cuda")
    min_tokens = torch.full((B,), 3, dtype=torch.long, device="cuda")
    max_tokens = torch.full((B,), 12, dtype=torch.long, device="cuda")
    num_generated = torch.zeros(B, dtype=torch.long, device="cuda")
    finished = torch.zeros(B, dtype=torch.bool, device="cuda")
    ones = torch.ones(B, 1, dtype=torch.long, device="cuda")

    def forward():
        logits = hidden @ lm_head
        seen = prompt_mask | (output_counts > 0)
        rep = rep_pen.unsqueeze(1).expand_as(logits)
        penalized = torch.where(logits > 0, logits / rep, logits * rep)
        logits = torch.where(seen, penalized, logits)
        logits = logits - freq_pen.unsqueeze(1) * output_counts
        logits = logits - pres_pen.unsqueeze(1) * (output_counts > 0)
        logits[:, EOS].masked_fill_(num_generated < min_tokens, -float("inf"))
        logits = _apply_top_k_top_p(logits, top_k, top_p)
        probs = logits.softmax(-1)
        tokens = probs.argmax(-1)
        output_counts.scatter_add_(1, tokens.unsqueeze(1), ones)
        num_generated.add_(1)
        stop_check(tokens, num_generated, max_tokens, finished)
        return probs, tokens, finished

    def next_step(step: int) -> None:
        hidden.copy_(torch.randn(B, D, device="cuda"))
        slot = step % B
        if step % 3 == 2:  # a new request takes slot `slot`: reset its state in place
            output_counts[slot].zero_()
            num_generated[slot] = 0
            prompt_mask[slot].copy_(torch.rand(V, device="cuda") < 0.1)
            rep_pen[slot] = 1.0 + 0.1 * (step % 4)
            freq_pen[slot] = 0.05 * (step % 3)
            pres_pen[slot] = 0.1 * (step % 2)
            top_k[slot] = 3 + step % 20
            top_p[slot] = 0.5 + 0.05 * (step % 9)
            min_tokens[slot] = step % 5
            max_tokens[slot] = 6 + step % 7

    return forward, next_step
