"""Models for ``bisect``, each with one planted bug (or none), and the line it must name.

Each ``FN`` builds a tiny model on the device and returns ``(forward, next_step)``; the
comment ``# BUG`` marks the line bisect must name, found by :func:`bug_line`. Breaks are
decorated at module level, as a user's code does.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F

import breakable_cudagraph as bcg

D = 16


def bug_line(marker: str) -> int:
    """The line of this file that carries ``# BUG: marker``."""
    for number, text in enumerate(Path(__file__).read_text().splitlines(), 1):
        if f"# BUG: {marker}" in text:
            return number
    raise LookupError(marker)


def _weight(rows: int, cols: int) -> torch.Tensor:
    return torch.randn(rows, cols, device="cuda") / rows**0.5


@bcg.eager_break_during_capture
def rms_break(x: torch.Tensor, out: torch.Tensor) -> None:
    # A correct break: eager work between two graph segments, written into a static buffer.
    out.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def _mlp(tokens: int = 8):
    x = torch.randn(tokens, D, device="cuda")
    return x, _weight(D, D), _weight(D, D), torch.empty(tokens, D, device="cuda")


def _new_x(x: torch.Tensor) -> None:
    x.copy_(torch.randn(x.shape, device="cuda"))


def correct():
    x, w1, w2, normed = _mlp()

    def forward():
        rms_break(torch.relu(x @ w1), normed)
        return normed @ w2

    def next_step(step: int) -> None:
        _new_x(x)

    return forward, next_step


def frozen_host_value():
    x, w1, w2, normed = _mlp()
    meta = SimpleNamespace(temperature=1.0)  # host metadata a runner updates in place

    def forward():
        rms_break(x @ w1, normed)
        logits = normed @ w2
        return logits / meta.temperature  # BUG: frozen

    def next_step(step: int) -> None:
        _new_x(x)
        meta.temperature = 0.5 + 0.25 * step

    return forward, next_step


def _attention(q, k, v, lengths):
    # Varlen attention over packed sequences: it loops over host lengths, so it must be a
    # break; captured as plain ops, its slices keep the capture's lengths.
    outs, start = [], 0
    for n in lengths:
        span = slice(start, start + n)  # host-only: the ops are the slices below
        q_n = q[:, span]  # BUG: attention
        k_n, v_n = k[:, span], v[:, span]
        outs.append(F.scaled_dot_product_attention(q_n, k_n, v_n, is_causal=True))
        start += n
    return torch.cat(outs, 1)


def attention_not_a_break():
    tokens = 8
    x = torch.randn(tokens, D, device="cuda")
    wq, wk, wv, wo = (_weight(D, D) for _ in range(4))
    meta = SimpleNamespace(lengths=[3, 5])
    splits = [[5, 3], [2, 6], [4, 4]]
    normed = torch.empty(tokens, D, device="cuda")

    def forward():
        rms_break(x, normed)
        q, k, v = ((normed @ w).view(1, tokens, D) for w in (wq, wk, wv))
        return _attention(q, k, v, meta.lengths)[0] @ wo

    def next_step(step: int) -> None:
        _new_x(x)
        meta.lengths[:] = splits[step % len(splits)]

    return forward, next_step


@bcg.eager_break_during_capture
def delta_break(h: torch.Tensor, out: torch.Tensor, state: SimpleNamespace) -> None:
    # The change of h since the previous step.
    previous = state.previous if state.previous is not None else torch.zeros_like(h)
    out.copy_(h - previous)  # BUG: cached
    state.previous = h  # keeps a reference: at replay h is the same tensor every step


def break_caches_a_tensor():
    x, w1, w2, delta = _mlp()
    state = SimpleNamespace(previous=None)

    def forward():
        delta_break(x @ w1, delta, state)
        return delta @ w2

    def next_step(step: int) -> None:
        _new_x(x)

    return forward, next_step


def stream_race():
    x, w1, w2, normed = _mlp()
    side = torch.cuda.Stream()

    def forward():
        rms_break(x @ w1, normed)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            gate = torch.sigmoid(normed)
        out = gate * normed  # BUG: race
        torch.cuda.current_stream().wait_stream(side)  # joined too late
        return out @ w2

    def next_step(step: int) -> None:
        _new_x(x)

    return forward, next_step


def rebound_input():
    x, w1, w2, normed = _mlp()
    inputs = {"x": x}

    def forward():
        h = inputs["x"] @ w1  # BUG: rebound
        rms_break(h, normed)
        return normed @ w2

    def next_step(step: int) -> None:
        inputs["x"] = torch.randn(x.shape, device="cuda")  # rebinding, not copying into x

    return forward, next_step


def host_branch():
    x, w1, w2, normed = _mlp()
    bias = torch.randn(D, device="cuda")
    meta = SimpleNamespace(with_bias=False)

    def forward():
        h = x @ w1
        if meta.with_bias:
            h = h + bias  # BUG: branch
        rms_break(h, normed)
        return normed @ w2

    def next_step(step: int) -> None:
        _new_x(x)
        meta.with_bias = step % 2 == 1

    return forward, next_step


@bcg.eager_break_during_capture
def scaled(x: torch.Tensor) -> torch.Tensor:
    # A break that returns a new tensor: the library's contract refreshes it at replay.
    return x * 2


def returns_a_tensor():
    x, w1, w2, _ = _mlp()

    def forward():
        h = scaled(x @ w1)
        return torch.relu(h) @ w2  # BUG: stale return

    def next_step(step: int) -> None:
        _new_x(x)

    return forward, next_step


def wrong_shape():
    return 3


def raises():
    raise ValueError("no model here")


@bcg.eager_break_during_capture
def scaled_break(x: torch.Tensor, out: torch.Tensor, scale: float) -> None:
    out.copy_(x * scale)


def break_gets_a_host_number():
    x, w1, w2, scaled_out = _mlp()
    meta = SimpleNamespace(scale=1.0)

    def forward():
        scaled_break(x @ w1, scaled_out, meta.scale)  # BUG: break argument
        return scaled_out @ w2

    def next_step(step: int) -> None:
        _new_x(x)
        meta.scale = 2.0 + step

    return forward, next_step


_builds = [0]


def not_deterministic():
    _builds[0] += 1  # each build differs: bisect's two copies are not the same model
    x, w1, w2, normed = _mlp()
    w1.add_(_builds[0])

    def forward():
        rms_break(x @ w1, normed)
        return normed @ w2

    def next_step(step: int) -> None:
        _new_x(x)

    return forward, next_step


def break_decorated_too_early():
    from tests.harness.bisect.early_breaks import early_rms

    x, w1, w2, normed = _mlp()

    def forward():
        early_rms(x @ w1, normed)
        return normed @ w2

    def next_step(step: int) -> None:
        _new_x(x)

    return forward, next_step


def _host_read_attention(q, lengths):
    outs, start = [], 0
    for n in lengths.tolist():  # BUG: host read
        span = slice(start, start + n)
        outs.append(F.scaled_dot_product_attention(q[:, span], q[:, span], q[:, span]))
        start += n
    return torch.cat(outs, 1)


def host_read_not_a_break():
    # Varlen attention reading the lengths with .tolist() but not marked as a break: the
    # capture refuses the host read.
    x, w1, _, normed = _mlp()
    lengths = torch.tensor([3, 5], device="cuda")

    def forward():
        rms_break(x @ w1, normed)
        return _host_read_attention(normed[None], lengths)

    def next_step(step: int) -> None:
        _new_x(x)

    return forward, next_step


def rebound_positions():
    # Rotary-style positions: the first op reading the rebound tensor is the dtype cast.
    x, w1, w2, normed = _mlp()
    batch = SimpleNamespace(positions=torch.arange(8, device="cuda"))
    freqs = torch.randn(D, device="cuda")

    def forward():
        pos = batch.positions.to(torch.float32)  # BUG: rebound positions
        angles = pos[:, None] * freqs
        rms_break(x @ w1 + torch.sin(angles), normed)
        return normed @ w2

    def next_step(step: int) -> None:
        _new_x(x)
        batch.positions = torch.arange(8, device="cuda") + step + 1  # rebinding, not copy_

    return forward, next_step


@bcg.eager_break_during_capture
def top_k_renormalize(probs: torch.Tensor) -> None:
    # A sampler's top-k filter, in place: probabilities below the 4th largest are dropped.
    kth = probs.topk(4, dim=-1).values.select(-1, 3)
    probs.mul_(probs >= kth[:, None])
    probs.div_(probs.sum(-1, keepdim=True))


def cpu_scalar_temperature():
    x, w1, w2, normed = _mlp()
    temperature = torch.tensor(1.0)  # a host scalar: no device=

    def forward():
        rms_break(x @ w1, normed)
        logits = normed @ w2
        scaled = logits / temperature  # BUG: host scalar
        probs = torch.softmax(scaled, -1)
        top_k_renormalize(probs)
        return probs

    def next_step(step: int) -> None:
        _new_x(x)
        temperature.fill_(1.0 if step < 2 else 0.7)  # a temperature schedule

    return forward, next_step


@bcg.eager_break_during_capture
def penalize(logits: torch.Tensor, state: SimpleNamespace) -> torch.Tensor:
    # A logits processor with nothing to do returns its argument, else a new tensor: the
    # library refuses the mix at replay (graphs read the result through one memory).
    if not state.active:
        return logits  # BUG: returns its argument
    return logits - state.penalty


def returns_argument_or_new():
    x, w1, w2, _ = _mlp()
    state = SimpleNamespace(active=False, penalty=0.5)

    def forward():
        logits = x @ w1
        processed = penalize(logits, state)  # BUG: refused break
        return processed @ w2

    def next_step(step: int) -> None:
        _new_x(x)
        state.active = step % 2 == 1

    return forward, next_step
