"""A small transformer with a bug ``bisect`` finds: a host-dependent op in a captured segment.

``transformer()`` builds one decoder block over a batch padded to ``MAX_TOKENS`` tokens, with
attention as an eager break (it reads the sequence lengths on the host) and returns
``(forward, next_step)`` as ``python -m verification bisect`` expects. The bug: the final
projection keeps only the step's real tokens, ``hidden[: meta.num_tokens]``, a slice by a host
integer. Eagerly that is right; captured, the slice keeps the capture's token count at every
replay. Run this file, or ``python -m verification bisect examples.bisect_transformer:transformer``,
to see bisect name that line.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

import breakable_cudagraph as bcg

MAX_TOKENS, DIM, VOCAB = 8, 16, 32
LENGTHS = ([3, 5], [2, 4], [6, 1], [1, 1])  # per step: the real tokens of each sequence


@bcg.eager_break_during_capture
def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor
) -> torch.Tensor:
    """Causal attention within each packed sequence; the lengths are read on the host."""
    out = torch.zeros_like(q)
    start = 0
    for n in lengths.tolist():
        n = max(0, min(int(n), q.shape[0] - start))  # capture-time data may be anything
        s = slice(start, start + n)
        scores = (q[s] @ k[s].T) / math.sqrt(q.shape[-1])
        mask = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        out[s] = scores.masked_fill(~mask, -math.inf).softmax(-1) @ v[s]
        start += n
    return out


def transformer():
    def weight(rows: int, cols: int) -> torch.Tensor:
        return torch.randn(rows, cols, device="cuda") / math.sqrt(rows)

    embed, wq, wk, wv, wo = weight(VOCAB, DIM), *(weight(DIM, DIM) for _ in range(4))
    w_up, w_down, lm_head = weight(DIM, 4 * DIM), weight(4 * DIM, DIM), weight(DIM, VOCAB)
    ids = torch.zeros(MAX_TOKENS, dtype=torch.long, device="cuda")  # static inputs
    lengths = torch.tensor(LENGTHS[0], device="cuda")
    meta = SimpleNamespace(num_tokens=sum(LENGTHS[0]))  # host metadata, updated in place

    def forward() -> torch.Tensor:
        x = embed[ids]
        h = torch.nn.functional.rms_norm(x, (DIM,))
        x = x + attention(h @ wq, h @ wk, h @ wv, lengths) @ wo  # eager break
        h = torch.nn.functional.rms_norm(x, (DIM,))
        x = x + torch.nn.functional.gelu(h @ w_up) @ w_down
        return x[: meta.num_tokens] @ lm_head  # BUG: a host integer, frozen at capture

    def next_step(step: int) -> None:
        split = LENGTHS[(step + 1) % len(LENGTHS)]
        ids.copy_(torch.randint(0, VOCAB, (MAX_TOKENS,), device="cuda"))
        lengths.copy_(torch.tensor(split, device="cuda"))
        meta.num_tokens = sum(split)

    return forward, next_step


def main() -> None:
    from verification.bisect import bisect

    result = bisect("examples.bisect_transformer:transformer", steps=4, say=print)
    if result.finding is not None:
        print("\n".join(result.finding.lines()))
    print(result.line())


if __name__ == "__main__":
    main()
