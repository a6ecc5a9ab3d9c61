"""Engine scenario: the runner loop of a small transformer, as vLLM and SGLang drive a
breakable graph, replays as eager does.

One decorated attention break is called in every layer; it reads the sequence lengths the
host prepares before each replay (a Python list, updated in place, in an attention-metadata
object) and their device copy, a slice of a static buffer the runner copies into: every batch
size passes a tensor at the same address with another shape, as vLLM's metadata does. A logits-processor break applies a logit bias the host sets per step and has nothing
to do without one: under a contract that refreshes returned tensors it returns its input then
and a new tensor otherwise; under ``out-buffer`` it writes into the buffer it is given. Whether
a capture has a bias to apply is drawn per capture and kept by its replays (new values each
time), so each capture's processor returns its input every time or a new tensor every time: a
switch between the two is a case the contract lets a target refuse, which the fuzzer draws. The runner captures every
batch size of a drawn :class:`~verification.properties.capture_set.CaptureSet` into one pool,
largest first, on a stream of its own, then replays them in the drawn order on the drawn
stream, after copying new tokens into the static buffers, and drops and re-captures some;
every replay must equal the eager forward on the same tokens and host values, and the
caller's current stream must be unchanged after every capture and replay.

A target with a capture-set API (:attr:`~verification.targets.Target.capture_set`) is then
given the same decoder as a function of the batch and the same sizes: making the set must run
the function at every size, largest first; calls at every captured size, at a batch one below
each size that is not captured (padded), and at one above the largest (eager), made so that
each of these batches follows every other (and itself), :func:`every_history`, must equal the
eager forward at that batch, with outputs of that batch, without running
the function except above the largest size, and leave the caller's stream current; a replayed
call's breaks must be given the batch's rows and then the pad value, never an earlier call's
rows; the outputs of every replayed call must lie in one graph pool. A fixed set of sizes 4 and 2
runs first, so that padded batches are always among them, called so that each batch follows
every history of two calls, each call given its inputs sliced from the caller's own buffers,
rewritten in place as an engine's are, the set padding with -1 (drawn examples draw new tensors
or the caller's buffers, and a pad value of 0, 1 or -1); the target's runner is driven at the
same batches alike. An engine's sizes (1, 2, 4, then every 8, to 32) are then called at 60
batches drawn once for all, up to one above the largest.
"""

from __future__ import annotations

import contextlib
import functools
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from verification.causes import Problem, describe, within
from verification.divergence import FOREIGN_CALLS, layout_cause
from verification.execute import (
    BreakEntry,
    TensorLayout,
    collector_paused,
    handed_layout,
    tensor_layouts,
)
from verification.findings import Finding
from verification.properties.base import (
    CheckConfig,
    CheckResult,
    Findings,
    property_finding,
    scenario_of,
    timed,
)
from verification.properties.capture_set import CaptureSet, capture_sets
from verification.properties.runner import runner_class
from verification.properties.runs import capture_place, capture_streams, pool_of, stream_left
from verification.search import symptom

NAME = "engine"
LAYERS = 2
D_MODEL = 16
HEADS = 2
FFN = 32
VOCAB = 32
SEQ = 3
MAX_BATCH = 4
RTOL = ATOL = 1e-4
# An example costs about forty-one fuzz examples (six for the runner loop, twenty-one for a
# target's capture set called at every pair of batches, fourteen for its runner's): the
# hypothesis budget is divided by this.
COST = 41
# The scenario run first, whatever is drawn: every size, out of order, one re-capture,
# replayed on a stream neither captured on, one capture with a bias and one without.
CANONICAL: dict[str, Any] = {
    "capture_set": {
        "sizes": (3, 2, 1),
        "replays": (1, 2, 0),
        "remake": (2,),
        "capture_stream": "runner",
        "replay_stream": "other",
    },
    "biased": (False, True),
}
# The capture set's fixed scenario, also run first: batches 1 and 3 fall between sizes (padded),
# 5 above them (eager), whatever sizes are drawn.
SWEEP_SIZES = (4, 2)
# An engine's sizes (1, 2, 4, then every 8), to 32, called at random batches up to 33: many
# sizes, and histories longer than a walk covers.
ENGINE_SIZES = (1, 2, 4, 8, 16, 24, 32)
ENGINE_CALLS = 60


class AttentionMetadata:
    """What the runner prepares on the host before each replay, as vLLM's attention metadata."""

    def __init__(self, lengths: list[int]) -> None:
        self.lengths = lengths


class LogitBias:
    """A logits processor's host state: token -> bias, empty when there is nothing to do."""

    def __init__(self) -> None:
        self.bias: dict[int, float] = {}


def causal_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    seq_lens: torch.Tensor,
    metadata: Any,
    out: torch.Tensor,
) -> None:
    """Causal attention over each sequence's first ``metadata.lengths[i]`` tokens; the mask is
    built from host values read at every call, so it cannot be captured. Padding positions
    are zeroed from ``seq_lens``, the same lengths on the device."""
    batch, seq = q.shape[0], q.shape[1]
    lengths = torch.tensor(metadata.lengths[:batch]).view(batch, 1, 1)
    position = torch.arange(seq)
    # Query i sees keys j <= i of its own sequence; padding positions see nothing, output 0.
    visible = (position.view(1, 1, seq) <= position.view(1, seq, 1)) & (
        position.view(1, 1, seq) < lengths
    )
    valid = torch.arange(seq, device=q.device).view(1, seq) < seq_lens.view(batch, 1)
    scores = q.transpose(1, 2) @ k.permute(0, 2, 3, 1) * q.shape[-1] ** -0.5
    scores = scores.masked_fill(~visible.unsqueeze(1).to(q.device), float("-inf"))
    o = (scores.softmax(-1).nan_to_num(0.0) @ v.transpose(1, 2)).transpose(1, 2)
    out.copy_(o * valid.to(q.dtype).view(batch, seq, 1, 1))


def _bias_row(state: LogitBias, logits: torch.Tensor) -> torch.Tensor:
    row = torch.zeros(logits.shape[-1], dtype=logits.dtype)
    for token, value in state.bias.items():
        row[token] = value
    return row.to(logits.device)


def bias_logits(logits: torch.Tensor, state: LogitBias) -> torch.Tensor:
    """Returns ``logits`` itself when no bias is set, a new tensor otherwise."""
    if not state.bias:
        return logits
    return logits + _bias_row(state, logits)


def bias_logits_into(logits: torch.Tensor, state: LogitBias, out: torch.Tensor) -> None:
    """The same, written into the caller's buffer (the ``out-buffer`` contract)."""
    out.copy_(logits)
    if state.bias:
        out.add_(_bias_row(state, logits))


def _rms_norm(h: torch.Tensor) -> torch.Tensor:
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)


@dataclass
class TinyDecoder:
    """Random weights; :meth:`forward` returns the last token's logits and next-token
    probabilities after the logits processor."""

    embed: torch.Tensor
    layers: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]

    @classmethod
    def build(cls, device: str, seed: int) -> TinyDecoder:
        g = torch.Generator().manual_seed(seed)

        def w(*shape: int) -> torch.Tensor:
            return (torch.randn(*shape, generator=g) * shape[0] ** -0.5).to(device)

        layers = [
            (w(D_MODEL, 3 * D_MODEL), w(D_MODEL, D_MODEL), w(D_MODEL, FFN), w(FFN, D_MODEL))
            for _ in range(LAYERS)
        ]
        return cls(w(VOCAB, D_MODEL), layers)

    def forward(
        self,
        tokens: torch.Tensor,
        last: torch.Tensor,
        seq_lens: torch.Tensor,
        metadata: AttentionMetadata,
        state: LogitBias,
        breaks: tuple[Any, Any, bool],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        attention, processor, returns = breaks
        batch = tokens.shape[0]
        h = self.embed[tokens]
        for wqkv, wo, w_up, w_down in self.layers:
            q, k, v = (_rms_norm(h) @ wqkv).view(batch, SEQ, 3, HEADS, -1).unbind(2)
            out = torch.empty_like(q)
            attention(q, k, v, seq_lens, metadata, out)
            h = h + out.reshape(batch, SEQ, D_MODEL) @ wo
            h = h + F.silu(_rms_norm(h) @ w_up) @ w_down
        logits = h[torch.arange(batch, device=h.device), last] @ self.embed.T
        if returns:
            processed = processor(logits, state)
        else:
            processed = torch.empty_like(logits)
            processor(logits, state, processed)
        return logits, processed.softmax(-1)


def _step_inputs(
    seed: int, size: int, biased: bool
) -> tuple[torch.Tensor, list[int], dict[int, float]]:
    """One step's tokens, sequence lengths and logit bias."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, VOCAB, (size, SEQ), generator=g)
    lengths = torch.randint(1, SEQ + 1, (size,), generator=g).tolist()
    bias = {int(t): 2.0 for t in torch.randint(0, VOCAB, (2,), generator=g)} if biased else {}
    return tokens, lengths, bias


class LayoutLedger:
    """The layouts of the tensors each break call was handed, kept per capture and phase:
    a replay that hands a break another layout than its capture did names that, before the
    logits it makes differ (:func:`~verification.execute.handed_layout`)."""

    def __init__(self) -> None:
        self.calls: dict[tuple[str, int], list[BreakEntry]] = {}
        self.now: tuple[str, int] | None = None
        self.last: tuple[str, int] | None = None  # the phase entered last, ended or not
        self.dropped: set[tuple[TensorLayout, ...]] = set()

    def watch(self, fn: Any) -> Any:
        @functools.wraps(fn)
        def watched(*args: Any, **kwargs: Any) -> Any:
            if self.now is not None:
                calls = self.calls.setdefault(self.now, [])
                calls.append((len(calls), tensor_layouts(args, kwargs)))
            return fn(*args, **kwargs)

        return watched

    @contextlib.contextmanager
    def during(self, phase: str, index: int) -> Iterator[None]:
        self.now = self.last = (phase, index)
        if phase == "capture":  # a capture made again: what the dropped one was handed
            self.dropped.update(layouts for _, layouts in self.calls.get(self.now, []))
        self.calls[self.now] = []
        try:
            yield
        finally:
            self.now = None

    def moved(self, index: int, where: str) -> str | None:
        """Why replay of capture ``index`` called its breaks otherwise than the capture did
        (with tensors only another capture handed them, or handed in another layout), or
        None."""
        got = self.calls.get(("replay", index), [])
        given = self.calls.get(("capture", index), [])
        mine = {layouts for _, layouts in given}
        theirs = self.dropped | {
            layouts
            for (phase, other), calls in self.calls.items()
            if phase == "capture" and other != index
            for _, layouts in calls
        }
        foreign = [layouts for _, layouts in got if layouts not in mine and layouts in theirs]
        if foreign:
            return Problem(
                f"{where}: the replay made {len(got)} break calls where its capture made "
                f"{len(given)}, {len(foreign)} of them with the tensors only another (or a "
                "dropped) capture handed its breaks: the target replays work recorded by other "
                "capture objects",
                FOREIGN_CALLS,
            )
        moved = handed_layout(got, given)
        if moved is None:
            return None
        call, number, got_layout, given_layout, aspects = moved
        return Problem(
            f"{where}: break call {call} of the forward got tensor argument {number} with "
            f"another {' and '.join(aspects)} than the capture handed it ({got_layout}, given "
            f"{given_layout})",
            layout_cause(aspects),
        )


def _runner_loop_problem(scenario: dict[str, Any], config: Any) -> str | None:
    """Why the runner loop of ``scenario`` (a capture set and, per capture, whether a logit
    bias is set) differs from eager, or None."""
    capture_set = CaptureSet(**scenario["capture_set"])
    biased = tuple(scenario["biased"])
    target, device = config.target, config.device
    returns = bool(target.supports_tensor_returns)
    model = TinyDecoder.build(device, config.seed)
    ledger = LayoutLedger()
    wrap = target.eager_break_during_capture
    processor = bias_logits if returns else bias_logits_into
    breaks = (wrap(ledger.watch(causal_attention)), wrap(ledger.watch(processor)), returns)
    metadata, state = AttentionMetadata([SEQ] * MAX_BATCH), LogitBias()
    top = max(capture_set.sizes)
    tokens = torch.zeros((top, SEQ), dtype=torch.long, device=device)
    last = torch.full((top,), SEQ - 1, dtype=torch.long, device=device)
    seq_lens = torch.full((top,), SEQ, dtype=torch.long, device=device)
    pool = torch.cuda.graph_pool_handle()
    caller = torch.cuda.current_stream()
    runner = torch.cuda.Stream()
    replay_on = {
        "default": torch.cuda.default_stream(),
        "runner": runner,
        "other": torch.cuda.Stream(),
    }[capture_set.replay_stream]
    captures: list[Any] = [None] * len(capture_set.sizes)
    outputs: list[Any] = [None] * len(capture_set.sizes)

    def capture(index: int) -> str | None:
        size = capture_set.sizes[index]
        place = capture_place(capture_set.capture_stream, target)
        kwargs: dict[str, Any] = {"pool": pool, **place.kwargs}
        runner.wait_stream(caller)
        state.bias.clear()  # what the last replay set
        if biased[index % len(biased)]:  # a new tensor the replays copy into
            state.bias.update({0: 1.0})
        with torch.cuda.stream(runner):
            model.forward(tokens[:size], last[:size], seq_lens[:size], metadata, state, breaks)
            place.enter(runner)
            with place.around:
                captures[index] = target.BreakableCUDAGraphCapture(**kwargs)
                before = torch.cuda.current_stream()
                with collector_paused(), ledger.during("capture", index), captures[index]:
                    outputs[index] = model.forward(
                        tokens[:size], last[:size], seq_lens[:size], metadata, state, breaks
                    )
                left = stream_left(before, f"the capture of batch size {size}")
            place.leave(runner)
        caller.wait_stream(runner)
        state.bias.clear()
        return left

    def replay(index: int, number: int) -> str | None:
        size = capture_set.sizes[index]
        fresh, lengths, bias = _step_inputs(
            config.seed * 1000 + number, size, biased[index % len(biased)]
        )
        metadata.lengths[:size] = lengths
        state.bias.clear()
        state.bias.update(bias)
        fresh_lens = torch.tensor(lengths, dtype=torch.long)
        expected = model.forward(
            fresh.to(device),
            (fresh_lens - 1).to(device),
            fresh_lens.to(device),
            metadata,
            state,
            breaks,
        )
        tokens[:size].copy_(fresh.to(device))
        last[:size].copy_((fresh_lens - 1).to(device))
        seq_lens[:size].copy_(fresh_lens.to(device))
        replay_on.wait_stream(caller)
        with torch.cuda.stream(replay_on):
            before = torch.cuda.current_stream()
            with ledger.during("replay", index):
                captures[index].replay()
            left = stream_left(before, f"replay() of batch size {size}")
        caller.wait_stream(replay_on)
        torch.cuda.synchronize()
        if left is not None:
            return left
        moved = ledger.moved(index, f"replay {number} (batch size {size})")
        if moved is not None:
            return moved
        for name, actual, want in zip(("logits", "probabilities"), outputs[index], expected):
            if not torch.allclose(actual, want, rtol=RTOL, atol=ATOL, equal_nan=False):
                worst = (actual - want).abs().nan_to_num(float("inf")).max().item()
                return (
                    f"replay {number} (batch size {size}, lengths {lengths}, "
                    f"{'a' if bias else 'no'} logit bias): the {name} differ from eager "
                    f"(largest difference {worst:.3g})"
                )
        return None

    order = [(index, False) for index in capture_set.replays]
    order += [(index, True) for index in capture_set.remake]
    try:
        for index in range(len(capture_set.sizes)):
            problem = capture(index)
            if problem is not None:
                return problem
        for number, (index, again) in enumerate(order):
            if again:
                reset = getattr(captures[index], "reset", None)
                if callable(reset):
                    reset()
                captures[index] = outputs[index] = None
                problem = capture(index)
                if problem is not None:
                    return problem
            problem = replay(index, number)
            if problem is not None:
                again_text = ", dropped and captured again," if again else ""
                return within(
                    f"the capture of batch size {capture_set.sizes[index]}{again_text}: ", problem
                )
    except Exception as error:  # the target's raising is its finding, as the fuzzer counts it
        replaying = ledger.last
        if replaying is not None and replaying[0] == "replay":
            moved = ledger.moved(replaying[1], "a replay that raised")
            if moved is not None:
                return moved
        return f"the target raised {describe(error)}"
    finally:
        for each in captures:
            reset = getattr(each, "reset", None)
            if callable(reset):
                reset()
    return None


def _sweep_batches(sizes: tuple[int, ...]) -> list[int]:
    """One above the largest size, then every captured size and a padded batch below each
    size whose batch - 1 is not captured, largest first."""
    padded = [size - 1 for size in sizes if size > 1 and size - 1 not in sizes]
    return [max(sizes) + 1, *sorted({*sizes, *padded}, reverse=True)]


def every_history(batches: list[int], length: int = 2) -> list[int]:
    """``batches`` called in an order in which every sequence of ``length`` of them (repeats
    included) is ``length`` consecutive calls, once: a de Bruijn sequence of that order, of
    ``len(batches) ** length + length - 1`` calls, starting with ``batches[0]``.

    A call of a capture set or a runner finds what the calls before it left (rows written past
    a smaller batch, buffers a call believes it filled, slices kept from the last call).
    Shrinking batches alone show only some of those histories, and so miss a call that pads
    only after some other size, or skips a copy after the same one; order 2 gives every call
    after every other, order 3 every call after every history of two."""
    word = [0] * (length + 1)
    order: list[int] = []

    def extend(position: int, period: int) -> None:  # Fredricksen-Kessler-Maiorana
        if position > length:
            if length % period == 0:
                order.extend(word[1 : period + 1])
            return
        word[position] = word[position - period]
        extend(position + 1, period)
        for symbol in range(word[position - period] + 1, len(batches)):
            word[position] = symbol
            extend(position + 1, position)

    extend(1, 1)
    cyclic = order + (order * length)[: length - 1]  # the last calls close the cycle
    return [batches[symbol] for symbol in cyclic]


def _rows_problem(
    where: str, given: torch.Tensor, lengths: list[int], pad_value: int
) -> str | None:
    """Whether the lengths a replay's attention break was given (the captured size's rows)
    are the batch's, then ``pad_value``, as a call must copy in and pad."""
    batch, size = len(lengths), given.shape[0]
    rows = given.tolist()
    if rows[:batch] != lengths:
        return f"{where}: the breaks were given lengths {rows[:batch]}, the batch's are {lengths}"
    if any(row != pad_value for row in rows[batch:]):
        return (
            f"{where}: the breaks of the captured size {size} were given rows {batch} to "
            f"{size - 1} holding {rows[batch:]}, not the pad value {pad_value}: rows past the "
            "batch must be padded, or another call's rows reach the graph"
        )
    return None


def _batch_inputs(
    step: _SweptStep, seed: int, batch: int, device: str
) -> tuple[tuple[torch.Tensor, ...], list[int]]:
    """A step's tokens, last positions and lengths on the device, the host lengths set: new
    tensors, or the step's caller buffers' ``[:batch]`` written in place."""
    tokens, lengths, _ = _step_inputs(seed, batch, False)
    step.metadata.lengths[:batch] = lengths
    lens = torch.tensor(lengths, dtype=torch.long)
    fresh = (tokens.to(device), (lens - 1).to(device), lens.to(device))
    if step.caller_buffers is None:
        return fresh, lengths
    for buffer, values in zip(step.caller_buffers, fresh):
        buffer[:batch].copy_(values)
    return tuple(buffer[:batch] for buffer in step.caller_buffers), lengths


def _after(calls: list[int], number: int, history: int) -> str:
    """Call ``number`` of ``calls`` and the ``history - 1`` calls before it, for a message."""
    before = calls[max(0, number - history + 1) : number]
    return f"batch {calls[number]}" + (f" after batches {before}" if before else " first")


def _sweep_call_problem(
    sweep: Any, step: _SweptStep, batch: int, number: int, config: Any, after: str
) -> str | None:
    """One call of the capture set at ``batch`` (``after``: the calls before it, for the
    message), against the eager forward on the same tokens."""
    batched, lengths = _batch_inputs(step, config.seed * 1000 + number, batch, config.device)
    expected = step.model.forward(*batched, step.metadata, step.state, step.breaks)
    before, caller = len(step.batches), torch.cuda.current_stream()
    step.given.clear()
    got = sweep(*batched)
    where = f"a call of the capture set at {after} (sizes {step.sizes}{step.how_given})"
    left = stream_left(caller, where)
    torch.cuda.synchronize()
    ran = step.batches[before:]
    if left is not None:
        return left
    if batch <= max(step.sizes) and ran:
        return f"{where} ran the function eagerly at batch {ran}, not a captured size's replay"
    if batch <= max(step.sizes) and step.given:
        problem = _rows_problem(where, step.given[0], lengths, step.pad_value)
        if problem is not None:
            return problem
    if batch > max(step.sizes) and ran != [batch]:
        return f"{where}, above the largest size, ran the function at batches {ran}, not once"
    problem = _outputs_problem(where, got, expected)
    if problem is None and batch <= max(step.sizes):
        step.pools.add(pool_of(got[0]))
    return problem


def _outputs_problem(where: str, got: Any, expected: tuple[torch.Tensor, ...]) -> str | None:
    """Whether a call returned the eager forward's logits and probabilities."""
    if not isinstance(got, (tuple, list)) or len(got) != len(expected):
        return f"{where} returned {type(got).__name__}, expected {len(expected)} tensors"
    for name, actual, want in zip(("logits", "probabilities"), got, expected):
        if tuple(actual.shape) != tuple(want.shape):
            return (
                f"{where}: the {name} have shape {tuple(actual.shape)}, eager's {tuple(want.shape)}"
            )
        if not torch.allclose(actual, want, rtol=RTOL, atol=ATOL, equal_nan=False):
            worst = (actual - want).abs().nan_to_num(float("inf")).max().item()
            return f"{where}: the {name} differ from eager (largest difference {worst:.3g})"
    return None


@dataclass
class _SweptStep:
    """The decoder as a function of the batch, recording the batch of every run."""

    model: TinyDecoder
    sizes: tuple[int, ...]
    metadata: AttentionMetadata
    state: LogitBias
    breaks: tuple[Any, Any, bool]
    batches: list[int]
    pools: set[Any]  # the graph pool of each replayed call's logits (None: no graph pool)
    # The device lengths each attention call was given since the last call of the set: at
    # replay, the captured size's rows of the static buffer.
    given: list[torch.Tensor]
    # The caller's own input buffers, one batch above the largest size, whose [:batch] every
    # call is given after writing it in place, as an engine reuses its input buffers; None:
    # every call is given new tensors.
    caller_buffers: tuple[torch.Tensor, ...] | None = None
    # What the capture set is asked to pad rows past the batch with.
    pad_value: int = 0

    @property
    def how_given(self) -> str:
        """How calls are given their inputs, for a message."""
        return "" if self.caller_buffers is None else ", inputs sliced from the caller's buffers"

    def __call__(
        self, tokens: torch.Tensor, last: torch.Tensor, seq_lens: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.batches.append(tokens.shape[0])
        return self.model.forward(tokens, last, seq_lens, self.metadata, self.state, self.breaks)


def _swept_step(
    sizes: tuple[int, ...], config: Any, caller_buffers: bool, pad_value: int = 0
) -> _SweptStep:
    """The decoder of ``config``'s seed with the target's breaks, for batches up to one above
    the largest of ``sizes``, given its inputs in the caller's own buffers or not, padded
    with ``pad_value`` by a capture set."""
    target = config.target
    returns = bool(target.supports_tensor_returns)
    given: list[torch.Tensor] = []

    @functools.wraps(causal_attention)
    def attention(q: Any, k: Any, v: Any, seq_lens: Any, metadata: Any, out: Any) -> None:
        given.append(seq_lens.clone())
        causal_attention(q, k, v, seq_lens, metadata, out)

    wrap = target.eager_break_during_capture
    breaks = (wrap(attention), wrap(bias_logits if returns else bias_logits_into), returns)
    metadata = AttentionMetadata([SEQ] * (max(sizes) + 1))
    model = TinyDecoder.build(config.device, config.seed)
    step = _SweptStep(model, sizes, metadata, LogitBias(), breaks, [], set(), given)
    step.pad_value = pad_value
    if caller_buffers:
        rows, long = max(sizes) + 1, {"dtype": torch.long, "device": config.device}
        step.caller_buffers = (
            torch.zeros((rows, SEQ), **long),
            torch.zeros(rows, **long),
            torch.zeros(rows, **long),
        )
    return step


def runner_sweep_problem(
    sizes: tuple[int, ...], config: Any, history: int = 2, caller_buffers: bool = False
) -> str | None:
    """Why the target's runner, driven as an engine drives one (the decoder called at every
    batch of ``sizes``' sweep, each a signature of its own, met largest first, each batch
    after every history of ``history - 1`` calls: :func:`every_history`), differs from eager,
    or None (also for a target without a runner). ``caller_buffers``: each call is given its
    inputs in the caller's own buffers (see :class:`_SweptStep`)."""
    runner_type = runner_class(config)
    if runner_type is None:
        return None
    step = _swept_step(sizes, config, caller_buffers)
    calls = every_history(_sweep_batches(sizes)[1:], history)
    where = "the target's runner"
    try:
        with collector_paused():
            runner = runner_type(step)
            for number, batch in enumerate(calls):
                where = f"the runner's call at {_after(calls, number, history)}{step.how_given}"
                seed = config.seed * 1000 + 500 + number
                batched, _ = _batch_inputs(step, seed, batch, config.device)
                expected = step.model.forward(*batched, step.metadata, step.state, step.breaks)
                got = runner(*batched)
                torch.cuda.synchronize()
                problem = _outputs_problem(where, got, expected)
                if problem is not None:
                    return problem
    except Exception as error:  # the target's raising is its finding, as the fuzzer counts it
        return f"{where} raised {error!r}"
    return None


def sweep_problem(
    sizes: tuple[int, ...],
    config: Any,
    history: int = 2,
    caller_buffers: bool = False,
    pad_value: int = 0,
    calls: list[int] | None = None,
) -> str | None:
    """Why the target's capture set of ``sizes``, made with ``pad_value``, each batch called
    after every history of ``history - 1`` calls (or called at ``calls``, when given: a
    message then names each call's ``history - 1`` before it), differs from eager, or None
    (also for a target without one). ``caller_buffers``: each call is given its inputs in the
    caller's own buffers (see :class:`_SweptStep`)."""
    target, device = config.target, config.device
    if target.capture_set is None:
        return None
    step = _swept_step(sizes, config, caller_buffers, pad_value)
    long = {"dtype": torch.long, "device": device}
    examples = (torch.zeros((1, SEQ), **long), torch.zeros(1, **long), torch.zeros(1, **long))
    caller = torch.cuda.current_stream()
    try:
        with collector_paused():
            sweep = target.capture_set(step, sizes, examples, pad_value=step.pad_value)
        left = stream_left(caller, f"making a capture set of sizes {sizes}")
        if left is not None:
            return left
        if set(step.batches) != set(sizes) or step.batches != sorted(step.batches, reverse=True):
            return (
                f"making a capture set of sizes {sizes} ran the function at batches "
                f"{step.batches}: every size once or more, largest first, was expected"
            )
        batches = _sweep_batches(sizes)
        # Beyond pairs, the eager batch above the sizes comes only first: it replays nothing,
        # and each batch more in a walk of order 3 costs its square in calls.
        if calls is None:
            calls = (
                every_history(batches, history)
                if history <= 2
                else [batches[0], *every_history(batches[1:], history)]
            )
        for number, batch in enumerate(calls):
            after = _after(calls, number, history)
            problem = _sweep_call_problem(sweep, step, batch, number, config, after)
            if problem is not None:
                return problem
        if len(step.pools) != 1 or None in step.pools:
            return (
                f"the capture set of sizes {sizes} returned outputs in graph pools "
                f"{sorted(step.pools, key=str)}: every size in one graph pool was expected"
            )
    except Exception as error:  # the target's raising is its finding, as the fuzzer counts it
        return f"the target's capture set of sizes {sizes} raised {error!r}"
    return None


def sweep_history_problem(config: Any) -> str | None:
    """:func:`sweep_problem` at :data:`SWEEP_SIZES`, each batch after every history of two
    calls (67 calls: too many for every drawn example, which gets every pair), given in the
    caller's own buffers and padded with -1, as an engine's are (vLLM pads its slot mapping
    with -1)."""
    return sweep_problem(SWEEP_SIZES, config, history=3, caller_buffers=True, pad_value=-1)


def engine_scale_problem(config: Any) -> str | None:
    """:func:`sweep_problem` at :data:`ENGINE_SIZES`, called at :data:`ENGINE_CALLS` batches
    drawn between 1 and one above the largest size (always the same ones), given in the
    caller's own buffers and padded with -1."""
    draw = random.Random(0)
    calls = [draw.randint(1, max(ENGINE_SIZES) + 1) for _ in range(ENGINE_CALLS)]
    return sweep_problem(
        ENGINE_SIZES, config, history=3, caller_buffers=True, pad_value=-1, calls=calls
    )


def runner_history_problem(config: Any) -> str | None:
    """:func:`runner_sweep_problem` at :data:`SWEEP_SIZES`, each batch after every history of
    two calls, given in the caller's own buffers."""
    return runner_sweep_problem(SWEEP_SIZES, config, history=3, caller_buffers=True)


def engine_problem(scenario: dict[str, Any], config: Any) -> str | None:
    """Why the runner loop of ``scenario``, or the target's capture set of its sizes, differs
    from eager, or None."""
    sizes = tuple(scenario["capture_set"]["sizes"])
    reused = bool(scenario.get("caller_buffers", False))
    pad_value = int(scenario.get("pad_value", 0))
    return (
        _runner_loop_problem(scenario, config)
        or sweep_problem(sizes, config, caller_buffers=reused, pad_value=pad_value)
        or runner_sweep_problem(sizes, config, caller_buffers=reused)
    )


def scenarios(streams: tuple[str, ...]) -> st.SearchStrategy[dict[str, Any]]:
    """Engine scenarios as plain data: a capture set captured on one of ``streams``, per
    capture whether a bias is set, whether the capture-set and runner calls are given their
    inputs in the caller's own buffers, and the value the capture set pads with (every value
    the decoder reads as an index or a length: 0, 1, or -1 as vLLM pads its slot mapping)."""
    return st.builds(
        lambda capture_set, biased, reused, pad_value: {
            "capture_set": capture_set.as_data(),
            "biased": biased,
            "caller_buffers": reused,
            "pad_value": pad_value,
        },
        capture_sets(3, streams),
        st.lists(st.booleans(), min_size=1, max_size=4).map(tuple),
        st.booleans(),
        st.sampled_from((0, -1, 1)),
    )


def example(program: Any, scenario: dict[str, Any], config: CheckConfig) -> str | None:
    """Re-checks one finding's scenario (a reproducer calls this)."""
    return engine_problem(dict(scenario["args"][0]) if "args" in scenario else CANONICAL, config)


def _key(finding: Finding) -> tuple[str, str, str]:
    """One symptom per cause: the same exception, or the same output differing, whatever
    batch size, replay, lengths or message text it showed with (each would shrink again)."""
    message = re.sub(r"raised (\w+)\(.*", r"raised \1", finding.message, flags=re.S)
    message = re.sub(r"^the capture of batch size [^:]*: ", "", message)
    message = re.sub(r"^a call of the capture set at batch [^:]*: ", "the capture set: ", message)
    message = re.sub(r"^the runner's call at [^:]*?( raised |: )", r"the runner\1", message)
    message = re.sub(r"^replay .*: the (\w+) differ.*", r"the \1 differ from eager", message)
    return finding.check, finding.kind, symptom(message)


def check(config: CheckConfig) -> CheckResult:
    def run() -> tuple[int, list[Finding]]:
        found = Findings(NAME, config)
        found.fixed(functools.partial(engine_problem, CANONICAL))
        found.fixed(sweep_history_problem)
        found.fixed(engine_scale_problem)
        found.fixed(runner_history_problem)

        def body(scenario: dict[str, Any]) -> Finding | None:
            problem = engine_problem(scenario, config)
            if problem is None:
                return None
            fixed = scenario_of(functools.partial(engine_problem, scenario))
            return property_finding(NAME, "target-bug", problem, None, config.seed, fixed)

        found.search(
            scenarios(capture_streams(config.target)),
            body,
            max(1, config.examples // COST),
            key=_key,
        )
        return found.result()

    return timed(NAME, run)
