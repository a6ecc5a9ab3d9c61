"""Everyday model code gives the same results on the device as on the CPU.

Each idiom is a small function of the device, written as Hugging Face's Llama, Mistral and
Qwen2 modeling code and vLLM's sampler and attention-metadata builders write it: tensor
factories with a device, ``new_*`` methods, pinned host buffers, advanced indexing with
lists, bool lists, masks and index tensors, gathers and scatters, masks for attention,
sampling. The test runs it on ``bcg_device`` (the simulator, or a GPU with
``--bcg-device=cuda``) and on the CPU, outside any capture, and compares: exactly for
integers and bools, within float tolerance otherwise. Every tensor the device run returns
must be on the device, except those an idiom returns through :class:`Host`.

Random idioms draw from a generator seeded on their own device; where the GPU's generator
gives other numbers than the CPU's, they return properties of the draw (shape, range,
support) or draw from distributions with one possible outcome.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

IDIOMS: dict[str, Callable[[str], Any]] = {}


def idiom(fn: Callable[[str], Any]) -> Callable[[str], Any]:
    IDIOMS[fn.__name__] = fn
    return fn


@dataclass
class Host:
    """A result that stays on the host in both runs (``.cpu()``, pinned buffers)."""

    value: Any


def _logits(device: str, rows: int = 3, vocab: int = 11) -> torch.Tensor:
    values = torch.arange(rows * vocab, dtype=torch.float32).reshape(rows, vocab)
    return (values * 0.37).sin().mul(4).to(device)


# --- factories --------------------------------------------------------------------------


@idiom
def tensor_from_nested_list(device):
    return torch.tensor([[1, 2, 3], [4, 5, 6]], device=device)


@idiom
def tensor_with_dtype_from_python_floats(device):
    return torch.tensor([0.5, 1.5, -2.0], dtype=torch.bfloat16, device=device)


@idiom
def scalar_tensor_on_device(device):
    return torch.tensor(7, device=device) * 3


@idiom
def tensor_pinned_then_non_blocking_copy(device):
    # vLLM's input batch: host staging buffers pinned, copied asynchronously.
    staged = torch.tensor([3, 1, 4, 1, 5], dtype=torch.int32, pin_memory=True)
    on_device = staged.to(device, non_blocking=True)
    torch.cuda.synchronize()
    return Host(staged.is_pinned()), on_device


@idiom
def empty_pinned_buffer_filled_from_numpy(device):
    buffer = torch.zeros(6, dtype=torch.int64, pin_memory=True)
    buffer[:4] = torch.from_numpy(np.array([9, 8, 7, 6]))
    return buffer[:4].to(device, non_blocking=True)


@idiom
def from_numpy_then_to_device(device):
    seq_lens = np.array([5, 3, 7], dtype=np.int32)
    return torch.from_numpy(np.cumsum(seq_lens)).to(device)


@idiom
def as_tensor_of_list_and_array(device):
    return (
        torch.as_tensor([1, 2, 3], device=device),
        torch.as_tensor(np.arange(4, dtype=np.float32), device=device),
    )


@idiom
def arange_positions_from_past_length(device):
    past, seq = 5, 4
    return torch.arange(past, past + seq, device=device).unsqueeze(0)


@idiom
def rotary_inverse_frequencies(device):
    base, dim = 10000.0, 8
    exponent = torch.arange(0, dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float)
    return 1.0 / (base ** (exponent / dim))


@idiom
def full_and_like_factories(device):
    x = torch.full((2, 3), -1.5, device=device)
    return x, torch.zeros_like(x), torch.ones_like(x, dtype=torch.int32), torch.full_like(x, 2)


@idiom
def empty_has_shape_dtype_and_device(device):
    x = torch.empty(2, 5, dtype=torch.float16, device=device)
    return Host((tuple(x.shape), x.dtype, x.device.type == torch.device(device).type))


@idiom
def linspace_and_logspace(device):
    return torch.linspace(0, 1, 5, device=device), torch.logspace(0, 2, 3, device=device)


@idiom
def eye_and_ones(device):
    return torch.eye(3, device=device, dtype=torch.bool), torch.ones(2, 2, device=device)


# --- new_* methods ----------------------------------------------------------------------


@idiom
def new_tensor_from_list(device):
    x = torch.ones(3, device=device)
    return x.new_tensor([1, 2])


@idiom
def new_zeros_ones_full(device):
    x = torch.ones(3, dtype=torch.float16, device=device)
    return x.new_zeros(2, 2), x.new_ones(3), x.new_full((2,), 4.0)


@idiom
def new_empty_keeps_dtype_and_device(device):
    x = torch.ones(3, dtype=torch.int32, device=device)
    y = x.new_empty((4,))
    return Host((tuple(y.shape), y.dtype, y.device == x.device))


# --- indexing ---------------------------------------------------------------------------


@idiom
def index_with_python_list(device):
    x = torch.arange(6.0, device=device)
    return x[[0, 2]]


@idiom
def index_with_bool_list(device):
    x = torch.arange(6.0, device=device)
    return x[[True, False, True, False, True, False]]


@idiom
def index_rows_and_columns_with_lists(device):
    x = torch.arange(12, device=device).view(3, 4)
    return x[[0, 2], [1, 3]], x[..., [0, 3]], x[None, :][:, [2, 0]]


@idiom
def index_with_bool_mask(device):
    x = torch.arange(8.0, device=device)
    return x[x % 3 == 1]


@idiom
def index_with_index_tensor(device):
    x = torch.arange(10, 20, device=device)
    return x[torch.tensor([4, 0, 4], device=device)]


@idiom
def last_token_hidden_state(device):
    hidden = torch.arange(24.0, device=device).view(2, 3, 4)
    return hidden[:, -1, :]


@idiom
def assign_through_python_list_index(device):
    x = torch.zeros(5, device=device)
    x[[1, 3]] = 5.0
    return x


@idiom
def assign_through_bool_mask(device):
    # vLLM's min-p: logits[~valid] = -inf
    logits = _logits(device)
    probs = logits.softmax(dim=-1)
    valid = probs >= 0.5 * probs.max(dim=-1, keepdim=True).values
    logits[~valid] = -float("inf")
    return logits


@idiom
def in_place_slice_assignment(device):
    buffer = torch.zeros(4, 6, dtype=torch.int32, device=device)
    buffer[:2, 1:4] = torch.arange(6, dtype=torch.int32, device=device).view(2, 3)
    buffer[3].fill_(7)
    return buffer


@idiom
def index_select_and_gather(device):
    x = torch.arange(12.0, device=device).view(3, 4)
    index = torch.tensor([2, 0], device=device)
    return x.index_select(0, index), x.gather(1, torch.tensor([[3], [0], [1]], device=device))


@idiom
def scatter_and_scatter_add(device):
    tokens = torch.tensor([[1, 1, 3], [0, 2, 2]], device=device)
    counts = torch.zeros(2, 5, dtype=torch.int64, device=device)
    counts.scatter_add_(1, tokens, torch.ones_like(tokens))
    seen = torch.zeros(2, 5, dtype=torch.bool, device=device).scatter_(1, tokens, True)
    return counts, seen


@idiom
def index_copy_into_static_kv_cache(device):
    cache = torch.zeros(1, 2, 6, 3, device=device)  # batch, heads, positions, head dim
    cache_position = torch.arange(2, 4, device=device)
    new = torch.arange(12.0, device=device).view(1, 2, 2, 3)
    cache.index_copy_(2, cache_position, new)
    return cache


@idiom
def index_put_with_accumulate(device):
    x = torch.zeros(4, device=device)
    index = torch.tensor([0, 2, 0], device=device)
    return x.index_put_((index,), torch.tensor([1.0, 2.0, 3.0], device=device), accumulate=True)


@idiom
def slot_mapping_from_block_table(device):
    # vLLM's attention metadata: block numbers of each token's position, times block size.
    block_size = 4
    block_table = torch.tensor([[7, 2, 0], [5, 9, 1]], dtype=torch.int32, device=device)
    positions = torch.tensor([0, 5, 3, 9], device=device)
    request = torch.tensor([0, 0, 1, 1], device=device)
    blocks = block_table.flatten()[request * block_table.shape[1] + positions // block_size]
    return blocks * block_size + positions % block_size


# --- masks ------------------------------------------------------------------------------


@idiom
def causal_mask_with_triu(device):
    dtype = torch.float32
    seq = 4
    mask = torch.full((seq, seq), torch.finfo(dtype).min, dtype=dtype, device=device)
    return torch.triu(mask, diagonal=1)


@idiom
def causal_mask_from_cache_position(device):
    dtype = torch.float16
    cache_position = torch.arange(2, 5, device=device)
    target = 6
    mask = torch.full((3, target), torch.finfo(dtype).min, dtype=dtype, device=device)
    mask *= torch.arange(target, device=device) > cache_position.reshape(-1, 1)
    return mask[None, None, :, :].expand(2, 1, -1, -1)


@idiom
def sliding_window_mask_with_tril(device):
    ones = torch.ones(5, 5, dtype=torch.bool, device=device)
    return torch.tril(ones) & ~torch.tril(ones, diagonal=-3)


@idiom
def padding_mask_from_lengths(device):
    lengths = torch.tensor([2, 4, 1], device=device)
    return torch.arange(4, device=device)[None, :] < lengths[:, None]


@idiom
def masked_fill_with_padding(device):
    scores = torch.zeros(2, 4, device=device)
    attention_mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]], device=device)
    return scores.masked_fill(attention_mask == 0, torch.finfo(torch.float32).min)


@idiom
def position_ids_from_attention_mask(device):
    attention_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]], device=device)
    position_ids = attention_mask.long().cumsum(-1) - 1
    return position_ids.masked_fill_(attention_mask == 0, 1)


@idiom
def where_select_and_where_indices(device):
    x = torch.tensor([-1.0, 2.0, -3.0, 4.0], device=device)
    return torch.where(x < 0, x * 1.2, x / 1.2), torch.where(x > 0)


@idiom
def nonzero_and_count(device):
    x = torch.tensor([[0, 1], [2, 0], [3, 4]], device=device)
    return x.nonzero(), x.nonzero(as_tuple=True), torch.count_nonzero(x), (x > 0).any(dim=1)


# --- model math -------------------------------------------------------------------------


@idiom
def rotary_embedding_cos_sin(device):
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 4, 2, device=device).float() / 4))
    position_ids = torch.arange(3, device=device)[None, :]
    expanded = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
    freqs = (expanded @ position_ids[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


@idiom
def rotate_half(device):
    x = torch.arange(8.0, device=device).view(2, 4)
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


@idiom
def rms_norm(device):
    hidden = torch.linspace(-2, 2, 12, device=device).view(3, 4).to(torch.bfloat16)
    weight = torch.ones(4, device=device, dtype=torch.bfloat16)
    input_dtype = hidden.dtype
    hidden = hidden.to(torch.float32)
    variance = hidden.pow(2).mean(-1, keepdim=True)
    hidden = hidden * torch.rsqrt(variance + 1e-6)
    return weight * hidden.to(input_dtype)


@idiom
def repeat_kv_for_grouped_query_attention(device):
    batch, kv_heads, seq, dim, n_rep = 1, 2, 3, 2, 2
    hidden = torch.arange(12.0, device=device).view(batch, kv_heads, seq, dim)
    expanded = hidden[:, :, None, :, :].expand(batch, kv_heads, n_rep, seq, dim)
    return expanded.reshape(batch, kv_heads * n_rep, seq, dim)


@idiom
def eager_attention_with_float32_softmax(device):
    q = torch.linspace(-1, 1, 24, device=device).view(1, 2, 3, 4).bfloat16()
    k = torch.linspace(1, -1, 24, device=device).view(1, 2, 3, 4).bfloat16()
    weights = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(4)
    return F.softmax(weights, dim=-1, dtype=torch.float32).to(q.dtype)


@idiom
def einsum_attention_scores(device):
    q = torch.linspace(-1, 1, 24, device=device).view(1, 2, 3, 4)
    k = torch.linspace(0, 1, 24, device=device).view(1, 2, 3, 4)
    return torch.einsum("bhqd,bhkd->bhqk", q, k)


@idiom
def silu_gated_mlp(device):
    x = torch.linspace(-3, 3, 8, device=device).view(2, 4)
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


@idiom
def embedding_lookup(device):
    weight = torch.arange(20.0, device=device).view(5, 4)
    return F.embedding(torch.tensor([[4, 0, 2]], device=device), weight)


@idiom
def pad_cat_stack_split(device):
    a = torch.arange(3, device=device)
    padded = F.pad(a, (0, 2), value=-1)
    stacked = torch.stack([padded, padded.flip(0)])
    return stacked, torch.cat([a, a]), torch.split(padded, [2, 3]), stacked.unbind(0)


@idiom
def dtype_casts_and_contiguous(device):
    x = torch.arange(6.0, device=device).view(2, 3)
    transposed = x.t()
    return transposed.contiguous(), x.to(torch.bfloat16), x.half().float(), x.int(), x.bool()


# --- sampling and metadata --------------------------------------------------------------


@idiom
def greedy_argmax_and_append(device):
    input_ids = torch.tensor([[1, 2], [3, 4], [5, 6]], device=device)
    next_tokens = torch.argmax(_logits(device)[:, -5:], dim=-1)
    return torch.cat([input_ids, next_tokens[:, None]], dim=-1)


@idiom
def eos_bookkeeping_with_isin(device):
    next_tokens = torch.tensor([2, 7, 0], device=device)
    unfinished = torch.ones(3, dtype=torch.long, device=device)
    eos = torch.tensor([7, 0], device=device)
    is_done = torch.isin(next_tokens, eos)
    unfinished = unfinished & ~is_done
    return unfinished, unfinished.max() == 0


@idiom
def temperature_and_top_k(device):
    logits = _logits(device)
    temperatures = torch.tensor([0.5, 1.0, 2.0], device=device)
    logits.div_(temperatures.unsqueeze(dim=1))
    kth = torch.topk(logits, 3)[0][..., -1, None]
    return logits.masked_fill(logits < kth, -float("inf"))


@idiom
def top_p_with_sort_cumsum_scatter(device):
    scores = _logits(device)
    sorted_logits, sorted_indices = torch.sort(scores, descending=False)
    cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    sorted_to_remove = cumulative <= (1 - 0.8)
    sorted_to_remove[..., -1:] = 0
    to_remove = sorted_to_remove.scatter(1, sorted_indices, sorted_to_remove)
    return scores.masked_fill(to_remove, -float("inf"))


@idiom
def repetition_penalty_with_gather(device):
    scores = _logits(device)
    input_ids = torch.tensor([[0, 3], [5, 5], [10, 1]], device=device)
    score = torch.gather(scores, 1, input_ids)
    score = torch.where(score < 0, score * 1.3, score / 1.3)
    return scores.scatter_(1, input_ids, score)


@idiom
def logprobs_ranks_and_topk(device):
    logprobs = _logits(device).log_softmax(dim=-1, dtype=torch.float32)
    token_ids = torch.tensor([1, 4, 9], device=device)
    token_logprobs = logprobs.gather(-1, token_ids.unsqueeze(-1))
    ranks = (logprobs >= token_logprobs).sum(-1)
    values, indices = torch.topk(logprobs, 2, dim=-1)
    return token_logprobs, ranks, values, indices.to(torch.int32)


@idiom
def query_start_loc_by_cumsum_into_slice(device):
    seq_lens = torch.tensor([3, 1, 4], dtype=torch.int32, device=device)
    query_start_loc = torch.zeros(4, dtype=torch.int32, device=device)
    torch.cumsum(seq_lens, dim=0, dtype=query_start_loc.dtype, out=query_start_loc[1:])
    return query_start_loc


@idiom
def request_of_each_token(device):
    num_tokens = torch.tensor([2, 0, 3], device=device)
    by_repeat = torch.repeat_interleave(torch.arange(3, device=device), num_tokens)
    cu = num_tokens.cumsum(0)
    by_search = torch.searchsorted(cu, torch.arange(5, device=device), right=True)
    return by_repeat, by_search


@idiom
def bincount_unique_and_argsort(device):
    tokens = torch.tensor([4, 1, 4, 2, 1, 4], device=device)
    values, inverse = torch.unique(tokens, return_inverse=True)
    return torch.bincount(tokens, minlength=6), values, inverse, tokens.argsort(stable=True)


@idiom
def floor_division_and_remainder(device):
    positions = torch.tensor([0, 5, 17, 31], device=device)
    return positions // 16, positions % 16, torch.div(positions, 3, rounding_mode="floor")


@idiom
def max_min_clamp_with_indices(device):
    x = _logits(device)
    values, indices = x.max(dim=-1)
    return values, indices, x.clamp(min=-1.0, max=1.0), x.amin(dim=0)


@idiom
def tolist_and_item_read_back(device):
    seq_lens = torch.tensor([5, 3, 7], device=device)
    return Host((seq_lens.tolist(), int(seq_lens.max().item()), seq_lens.sum().item()))


@idiom
def cpu_round_trip(device):
    x = torch.arange(4, device=device) * 2
    return Host(x.cpu()), Host(x.to("cpu").numpy().tolist())


# --- randomness -------------------------------------------------------------------------


def _generator(device: str, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


@idiom
def seeded_generator_draws_repeat(device):
    first = torch.randn(64, generator=_generator(device, 7), device=device)
    again = torch.randn(64, generator=_generator(device, 7), device=device)
    other = torch.randn(64, generator=_generator(device, 8), device=device)
    return torch.equal(first, again), torch.equal(first, other), first.abs().max() < 8


@idiom
def exponential_race_sampling_per_request_generator(device):
    # vLLM's random sampler: argmax of probs / Exp(1) noise, a generator per request.
    probs = torch.zeros(2, 5, device=device)
    probs[0, 3] = 1.0
    probs[1, 1] = 1.0
    q = torch.empty_like(probs)
    for row, seed in enumerate((11, 12)):
        q[row].exponential_(generator=_generator(device, seed))
    return probs.div(q).argmax(dim=-1).view(-1), (q > 0).all()


@idiom
def multinomial_of_one_hot_rows(device):
    probs = torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]], device=device)
    return torch.multinomial(probs, num_samples=1, generator=_generator(device, 3))


@idiom
def random_factories_shapes_and_ranges(device):
    generator = _generator(device, 5)
    uniform = torch.rand(2, 3, generator=generator, device=device)
    integers = torch.randint(3, 9, (10,), generator=generator, device=device)
    permutation = torch.randperm(6, generator=generator, device=device)
    return (
        ((uniform >= 0) & (uniform < 1)).all(),
        ((integers >= 3) & (integers < 9)).all(),
        permutation.sort().values,
    )


@idiom
def rand_like_and_dropout_keep_shape(device):
    x = torch.ones(4, 4, device=device)
    noise = torch.rand_like(x)
    dropped = F.dropout(x, p=0.5, training=True)
    return Host(noise.shape), ((dropped == 0) | (dropped == 2)).all()


# --- the test ---------------------------------------------------------------------------


def _same(got: Any, expected: Any, device_type: str, on_host: bool = False) -> None:
    if isinstance(expected, Host):
        assert isinstance(got, Host)
        _same(got.value, expected.value, device_type, on_host=True)
    elif isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor)
        assert got.device.type == ("cpu" if on_host else device_type), got.device
        assert got.dtype == expected.dtype and got.shape == expected.shape
        torch.testing.assert_close(got.cpu(), expected.cpu(), equal_nan=True)
    elif isinstance(expected, (tuple, list)):
        assert type(got) is type(expected) and len(got) == len(expected)
        for g, e in zip(got, expected):
            _same(g, e, device_type, on_host)
    else:
        assert got == expected


def test_half_softmax_to_float32_matches_the_float32_softmax(bcg_device: str):
    # The CPU has no half-to-float softmax kernel, so the reference converts first.
    scores = torch.linspace(-4, 4, 24).view(2, 3, 4).half()
    got = F.softmax(scores.to(bcg_device), dim=-1, dtype=torch.float32)
    assert got.dtype == torch.float32 and got.is_cuda
    torch.testing.assert_close(got.cpu(), F.softmax(scores.float(), dim=-1))


def test_generators_of_every_device_are_torch_generators(bcg_device: str):
    device_generator = torch.Generator(device=bcg_device)
    assert device_generator.device.type == "cuda"
    assert device_generator.manual_seed(1).device.type == "cuda"
    assert isinstance(device_generator, torch.Generator)
    assert isinstance(torch.default_generator, torch.Generator)
    assert torch.Generator().device.type == "cpu"


def test_at_least_forty_idioms_are_collected():
    assert len(IDIOMS) >= 40


@pytest.mark.parametrize("name", sorted(IDIOMS))
def test_idiom_gives_the_cpu_result_on_the_device(name: str, bcg_device: str):
    run = IDIOMS[name]
    expected = run("cpu")
    got = run(bcg_device)
    _same(got, expected, torch.device(bcg_device).type)
