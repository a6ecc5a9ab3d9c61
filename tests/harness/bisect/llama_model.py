"""A tiny Hugging Face Llama with a varlen attention break: a correct model for ``bisect``.

Random weights (no downloads), packed sequences whose lengths change every step. Attention
is an eager break that reads the lengths on the host (``.tolist()``); everything else is
captured. Replay must equal eager at every step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import transformers

import breakable_cudagraph as bcg

_IMPLEMENTATION = "bcg_bisect_varlen"
TOKENS = 8
SPLITS = ([3, 5], [6, 2], [8, 0], [1, 7])


@bcg.eager_break_during_capture
def varlen_attention(q, k, v, lengths, scaling):
    # Causal attention per packed sequence; the lengths are only known on the host.
    out = torch.empty_like(q)
    start = 0
    for n in lengths.tolist():
        n = max(0, min(int(n), q.shape[2] - start))  # capture-time data may be anything
        span = slice(start, start + n)
        out[:, :, span] = F.scaled_dot_product_attention(
            q[:, :, span], k[:, :, span], v[:, :, span], is_causal=True, scale=scaling
        )
        start += n
    return out.transpose(1, 2).contiguous()


def _attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    return varlen_attention(query, key, value, module.bcg_lengths, scaling), None


def _positions(lengths: list[int]) -> torch.Tensor:
    return torch.cat([torch.arange(n) for n in lengths if n])[None].to("cuda")


def llama():
    transformers.AttentionInterface.register(_IMPLEMENTATION, _attention)
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    config._attn_implementation = _IMPLEMENTATION
    model = transformers.LlamaForCausalLM(config).to("cuda").eval()
    lengths = torch.tensor(SPLITS[0], device="cuda")
    for layer in model.model.layers:
        layer.self_attn.bcg_lengths = lengths  # static: new lengths are copied into it
    ids = torch.randint(0, config.vocab_size, (1, TOKENS), device="cuda")
    positions = _positions(SPLITS[0])

    def forward():
        # No KV cache: its update builds tensors from host data, which a capture refuses.
        return model(input_ids=ids, position_ids=positions, use_cache=False).logits

    def next_step(step: int) -> None:
        split = SPLITS[(step + 1) % len(SPLITS)]
        ids.copy_(torch.randint(0, config.vocab_size, (1, TOKENS), device="cuda"))
        lengths.copy_(torch.tensor(split, device="cuda"))
        positions.copy_(_positions(split))

    return forward, next_step
