"""A small Hugging Face Llama, written as a user would for a GPU, captured with the library.

Random weights (no downloads), four layers, attention as an eager break that reads the
packed sequence lengths on the host with ``.tolist()``. The replay must equal eager
execution bitwise, on the simulator (CI) and on a GPU, from this one source: as written,
built and run inside ``with torch.device("cuda"):`` as model-building code does, and under
``torch.autocast("cuda", dtype=torch.bfloat16)`` as mixed-precision serving code runs.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F

import breakable_cudagraph as bcg

transformers = pytest.importorskip("transformers")

_IMPLEMENTATION = "bcg_varlen_break"


@bcg.eager_break_during_capture
def _varlen_attention(q, k, v, lengths, scaling):
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


class _Lengths:
    tensor: torch.Tensor | None = None


def _attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    return _varlen_attention(query, key, value, _Lengths.tensor, scaling), None


def _llama():
    transformers.AttentionInterface.register(_IMPLEMENTATION, _attention)
    config = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
    )
    config._attn_implementation = _IMPLEMENTATION
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to("cuda").eval()
    return model


def _packed(lengths, vocab, device):
    ids = torch.randint(0, vocab, (1, sum(lengths)), device=device)
    positions = torch.cat([torch.arange(n, device=device) for n in lengths])[None]
    return ids, positions


# How the whole test runs: model building, warm-up, capture, replays and eager reference.
_CONTEXTS = {
    "plain": contextlib.nullcontext,
    "cuda-default-device": lambda: torch.device("cuda"),
    "autocast-bf16": lambda: torch.autocast("cuda", dtype=torch.bfloat16),
}


@pytest.mark.parametrize("context", list(_CONTEXTS))
def test_llama_with_a_host_reading_attention_break_replays_bitwise(bcg_device, context):
    with _CONTEXTS[context]():
        _replays_bitwise()


def _replays_bitwise():
    model = _llama()
    lengths = [5, 11, 8]
    _Lengths.tensor = torch.tensor(lengths, device="cuda")
    ids, positions = _packed(lengths, model.config.vocab_size, "cuda")

    def forward():
        # No KV cache: its update builds tensors from host data, which a capture refuses.
        return model(input_ids=ids, position_ids=positions, use_cache=False).logits

    with torch.no_grad():
        forward()  # warm-up
        with bcg.BreakableCUDAGraphCapture() as capture:
            logits = forward()
        for seed in (1, 2):
            torch.manual_seed(seed)
            new_ids, _ = _packed(lengths, model.config.vocab_size, "cuda")
            ids.copy_(new_ids)
            capture.replay()
            torch.cuda.synchronize()
            expected = forward()
            assert torch.equal(logits, expected), f"replay differs from eager (seed {seed})"
        if torch.is_autocast_enabled("cuda"):
            hidden = torch.ones(1, model.config.hidden_size, device="cuda")
            assert model.lm_head(hidden).dtype == torch.bfloat16, "autocast did not apply"
