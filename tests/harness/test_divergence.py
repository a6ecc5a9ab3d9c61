"""A mismatch names the first place where the replay parts from eager: the first break whose
arguments (host values and containers, their types and whether each is the caller's own) or
result differ, else the graph segment whose output does."""

from __future__ import annotations

import torch

from verification.divergence import Recorder, first_parting, segment_of


def attention(x: torch.Tensor, seq_lens: list[int]) -> torch.Tensor:
    return x * sum(seq_lens)


def _record(recorder: Recorder, step: int, *args: object) -> None:
    record = recorder.before(step, attention, args, {})
    recorder.after(record, args, {}, attention(*args))


def test_a_break_handed_the_capture_time_copy_of_the_callers_list_is_named_so():
    x = torch.ones(2)
    runner_lens = [4, 6]  # the caller's list, updated in place before this replay
    eager, at_capture = Recorder(), Recorder()
    replayed = Recorder(owned=frozenset({id(runner_lens)}))
    _record(eager, 3, x, [4, 6])
    _record(at_capture, 3, x, [3, 5])
    _record(replayed, 3, x, [3, 5])  # a copy the target made at capture, not runner_lens
    parting = first_parting(eager.calls, replayed.calls, at_capture.calls, [])
    assert parting is not None
    assert parting.words == (
        "break `attention` at step 3 received `seq_lens` [3, 5] at replay where eager passed "
        "[4, 6]: the list it got is the one given at capture, not the caller's list"
    )
    assert parting.cause.kind == "capture-time-copy"
    # Handed the caller's own list, with its values as at capture: a value, not a copy.
    owned = [3, 5]
    honest = Recorder(owned=frozenset({id(owned)}))
    _record(honest, 3, x, owned)
    found = first_parting(eager.calls, honest.calls, at_capture.calls, [])
    assert found is not None and found.cause.kind == "values"


def test_a_break_whose_tensor_argument_differs_names_the_segment_before_it():
    eager, replayed = Recorder(), Recorder()
    _record(eager, 1, torch.tensor([1.0, 2.0]), [1])
    _record(replayed, 1, torch.tensor([1.0, 2.5]), [1])
    parting = first_parting(eager.calls, replayed.calls, [], [])
    assert parting is not None and "graph segment before it" in parting.words
    assert "received `x`" in parting.words and "eager 2, replay 2.5" in parting.words


def test_when_no_break_differs_the_segment_that_computed_the_output_is_named():
    eager, replayed = Recorder(), Recorder()
    _record(eager, 1, torch.ones(2), [1])
    _record(replayed, 1, torch.ones(2), [1])
    segment = segment_of(7, {7: 4}, [1])
    assert segment == "the graph segment after the last break (step 1)"
    parting = first_parting(eager.calls, replayed.calls, [], [(0, segment, "got 1, expected 2")])
    assert parting is not None and parting.words.startswith(segment)
    assert first_parting(eager.calls, replayed.calls, [], []) is None
