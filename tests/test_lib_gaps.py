"""Behaviours that mutants of the library changed without any test noticing (issue 12).

Each test pins one user-visible behaviour: conj views and tensor-free breaks as arguments,
the pool kept alive by an all-empty capture, the caller's stream after a disabled capture,
aborts of a failing ``capture_begin``, breaks from other threads, the runner's key and
defaults, and how the empty-graph warning is filtered whatever the caller's filters are.
"""

from __future__ import annotations

import functools
import gc
import threading
import warnings
import weakref

import pytest
import torch

from breakable_cudagraph import (
    BreakableCUDAGraphCapture,
    BreakableGraphRunner,
    eager_break_during_capture,
)
from breakable_cudagraph.segments import EagerStep


@eager_break_during_capture
def copy_into(out: torch.Tensor, src: torch.Tensor) -> None:
    out.copy_(src)


def test_conj_view_made_in_the_pool_keeps_its_conj_bit_at_replay(bcg_device: str) -> None:
    x = torch.zeros(3, dtype=torch.complex64, device=bcg_device)
    out = torch.empty_like(x)
    with BreakableCUDAGraphCapture() as capture:
        copy_into(out, (x * 1).conj())
    x.copy_(torch.tensor([1 + 2j, 3 - 1j, -2j], device=bcg_device))
    capture.replay()
    assert torch.equal(out, x.conj())


def test_break_without_tensor_arguments_is_recorded_and_replayed(bcg_device: str) -> None:
    calls: list[int] = []

    @eager_break_during_capture
    def note(log: list[int], value: int) -> None:
        log.append(value)

    with BreakableCUDAGraphCapture() as capture:
        note(calls, 7)
    capture.replay()
    assert calls == [7, 7]


def test_all_empty_capture_keeps_its_pool_for_the_buffers_its_breaks_use(bcg_device: str) -> None:
    x = torch.full((256,), 3.0, device=bcg_device)
    out = torch.empty_like(x)
    filled: list[bool] = []

    @eager_break_during_capture
    def fill_once(table: torch.Tensor) -> None:  # a lazily built table, written once
        if not filled:
            table.copy_(x)
            filled.append(True)

    capture = BreakableCUDAGraphCapture()
    with capture:
        table = torch.empty_like(x)  # pool memory; no kernel, so every segment is empty
        fill_once(table)
        copy_into(out, table)
    del table
    assert capture.num_graphs == 0
    # A later capture empties the allocator's cache: the pool must survive it, so the
    # table the breaks still read keeps what was written into it.
    with BreakableCUDAGraphCapture():
        torch.full((256,), 5.0, device=bcg_device)
    capture.replay()
    assert torch.equal(out, torch.full_like(x, 3.0))


def test_disabled_capture_restores_the_callers_stream(bcg_device: str) -> None:
    caller = torch.cuda.Stream()
    with torch.cuda.stream(caller):
        with BreakableCUDAGraphCapture(enabled=False):
            assert torch.cuda.current_stream() != caller
        assert torch.cuda.current_stream() == caller


def test_failing_capture_begin_on_entry_aborts_and_next_capture_works(
    bcg_device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_begin = torch.cuda.CUDAGraph.capture_begin
    before = torch.cuda.current_stream()

    def fail(self: torch.cuda.CUDAGraph, *args: object, **kwargs: object) -> None:
        raise RuntimeError("capture_begin failed")

    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_begin", fail)
    with pytest.raises(RuntimeError, match="capture_begin failed"):
        with BreakableCUDAGraphCapture():
            pass
    assert BreakableCUDAGraphCapture.current() is None
    assert torch.cuda.current_stream() == before
    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_begin", real_begin)
    x = torch.ones(2, device=bcg_device)
    with BreakableCUDAGraphCapture() as capture:
        y = x * 2
    capture.replay()
    assert torch.equal(y, torch.full_like(x, 2.0))


def test_add_eager_from_another_thread_is_refused(bcg_device: str) -> None:
    errors: list[BaseException] = []
    with BreakableCUDAGraphCapture() as capture:

        def other_thread() -> None:
            try:
                capture.add_eager(lambda: None)
            except RuntimeError as error:
                errors.append(error)

        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
    assert len(errors) == 1 and "this thread" in str(errors[0])
    assert capture.num_eager_breaks == 0


def test_runner_captures_again_when_only_a_keyword_value_changes(bcg_device: str) -> None:
    def scaled(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return x * scale

    runner = BreakableGraphRunner(scaled)
    x = torch.ones(3, device=bcg_device)
    assert torch.equal(runner(x, scale=3.0), torch.full_like(x, 3.0))
    assert torch.equal(runner(x, scale=5.0), torch.full_like(x, 5.0))
    assert len(runner.captures) == 2


def test_runner_defaults_warm_up_once_and_do_not_check_addresses(bcg_device: str) -> None:
    calls: list[int] = []

    def fn(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return x + 1

    runner = BreakableGraphRunner(fn)
    out = runner(torch.ones(2, device=bcg_device))
    assert len(calls) == 2  # one warm-up, one capture
    out.set_(torch.zeros(2, device=bcg_device))  # debug=True would raise on this move
    runner(torch.ones(2, device=bcg_device))


@pytest.mark.parametrize("caller_filter", ["error", "ignore", "default"])
def test_empty_graphs_are_dropped_silently_whatever_the_callers_warning_filter(
    bcg_device: str, caller_filter: str
) -> None:
    x = torch.ones(2, device=bcg_device)
    out = torch.empty_like(x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter(caller_filter)
        with BreakableCUDAGraphCapture() as capture:
            copy_into(out, x)  # breaks first and last: both segments are empty
            y = out * 2
            copy_into(out, y)
    assert capture.num_graphs == 1 and capture.num_eager_breaks == 2
    assert not [w for w in caught if "empty" in str(w.message)]


def test_other_warnings_from_capture_end_reach_the_caller(
    bcg_device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_end = torch.cuda.CUDAGraph.capture_end

    def warning_end(self: torch.cuda.CUDAGraph) -> None:
        warnings.warn("from capture_end", UserWarning, stacklevel=1)
        real_end(self)

    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_end", warning_end)
    x = torch.ones(2, device=bcg_device)
    with pytest.warns(UserWarning, match="from capture_end"):
        with BreakableCUDAGraphCapture():
            x * 2


def test_one_byte_pool_tensor_passed_to_a_break_is_not_owned_by_the_capture(
    bcg_device: str,
) -> None:
    # The smallest real storage is still pool memory: only empty storages are held strongly.
    x = torch.zeros(1, dtype=torch.uint8, device=bcg_device)
    out = torch.zeros_like(x)
    with BreakableCUDAGraphCapture() as capture:
        y = x + 1
        copy_into(out, y)
    probe = weakref.ref(y)
    del y
    gc.collect()
    assert probe() is None
    x.fill_(4)
    capture.replay()
    assert out.item() == 5


def test_add_eager_call_holds_pool_arguments_without_owning_them(bcg_device: str) -> None:
    # add_eager_call holds its arguments as the decorator does: a capture intermediate it was
    # given dies with the caller's last reference, and replay still reads its memory.
    x = torch.zeros(64, device=bcg_device)
    out = torch.zeros_like(x)
    with BreakableCUDAGraphCapture() as capture:
        y = x + 1
        capture.add_eager_call(out.copy_, (y,), {})
    probe = weakref.ref(y)
    del y
    gc.collect()
    assert probe() is None
    x.fill_(4)
    capture.replay()
    assert torch.equal(out, torch.full_like(out, 5))


@pytest.mark.gpu  # the simulator has no sparse device tensors
def test_sparse_tensor_given_to_a_break_is_held_as_it_is(bcg_device: str) -> None:
    # A sparse tensor has no storage to alias: asking for one raises, so it must be held.
    indices = torch.tensor([[0, 2]], device=bcg_device)
    sparse = torch.sparse_coo_tensor(indices, torch.ones(2, device=bcg_device), (4,))
    out = torch.zeros(4, device=bcg_device)

    @eager_break_during_capture
    def densify(s: torch.Tensor, o: torch.Tensor) -> None:
        o.copy_(s.to_dense())

    with BreakableCUDAGraphCapture() as capture:
        densify(sparse, out)
    out.zero_()
    capture.replay()
    assert out.tolist() == [1.0, 0.0, 1.0, 0.0]


@pytest.mark.parametrize("warmup", [True, -1, 1.5])
def test_runner_rejects_a_warmup_that_is_not_a_count(bcg_device: str, warmup: object) -> None:
    with pytest.raises(ValueError, match="warmup must be an int"):
        BreakableGraphRunner(lambda x: x, warmup=warmup)  # type: ignore[arg-type]


def test_decorator_takes_enable_only_by_keyword(bcg_device: str) -> None:
    with pytest.raises(TypeError):
        eager_break_during_capture(len, False)  # type: ignore[call-overload]


def test_pool_memory_ranges_include_the_segment_start_and_exclude_its_end(
    bcg_device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a GPU another pool's segment can start exactly where this pool's segment ends; a
    # tensor there is not pool memory and must be held strongly, not by a non-owning alias.
    from breakable_cudagraph.arguments import PoolMemory

    pool = (7, 0)
    segments = [
        {"address": 4096, "total_size": 2048, "segment_pool_id": pool},
        {"address": 6144, "total_size": 2048, "segment_pool_id": (0, 0)},
    ]
    monkeypatch.setattr(torch.cuda, "memory_snapshot", lambda: segments)
    memory = PoolMemory(pool)
    assert memory.addresses_in_pool([4095, 4096, 5000, 6143, 6144]) == {4096, 5000, 6143}


def test_eager_steps_are_named_by_qualname_else_by_repr(bcg_device: str) -> None:
    x = torch.ones(2, device=bcg_device)
    out = torch.empty_like(x)
    unnamed = functools.partial(copy_into, out)  # a partial has no __qualname__
    with BreakableCUDAGraphCapture() as capture:
        copy_into(out, x)
        capture.add_eager(lambda: None)
        capture.add_eager_call(unnamed, (x,), {})
    names = [step.name for step in capture.segments if isinstance(step, EagerStep)]
    assert names == [
        "copy_into",
        "test_eager_steps_are_named_by_qualname_else_by_repr.<locals>.<lambda>",
        repr(unnamed),
    ]


def _pool_bytes(pool: tuple[int, int]) -> int:
    """Bytes the allocator holds in ``pool``'s segments."""
    return sum(
        int(segment["total_size"])
        for segment in torch.cuda.memory_snapshot()
        if tuple(segment.get("segment_pool_id") or ()) == tuple(pool)
    )


def test_graph_whose_capture_end_raised_gives_its_pool_back_on_abort(
    bcg_device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The failed graph is reset by the abort, not left to the garbage collector: the
    # exception's traceback still references it while the caller handles the error. The
    # pool's own segments are measured: on the H200 the first capture of a process also
    # reserves 2 MiB outside any graph pool, for the CUDA generator's graph state.
    real_end = torch.cuda.CUDAGraph.capture_end

    def failing_end(self: torch.cuda.CUDAGraph) -> None:
        real_end(self)
        raise RuntimeError("capture_end failed")

    x = torch.ones(1 << 16, device=bcg_device)
    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_end", failing_end)
    with pytest.raises(RuntimeError, match="capture_end failed") as info:
        with BreakableCUDAGraphCapture() as capture:
            x * 2  # pool memory the graph uses; the tensor itself dies at once
            assert _pool_bytes(capture.pool) > 0
    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_end", real_end)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    assert info.value is not None  # the traceback is alive here
    assert _pool_bytes(capture.pool) == 0


def test_reset_releases_segments_the_caller_still_holds(bcg_device: str) -> None:
    # reset() frees the graphs and drops the held arguments even when the caller kept the
    # segment objects (capture.segments): their memory goes back and they cannot replay.
    x = torch.ones(1 << 16, device=bcg_device)
    out = torch.empty_like(x)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    reserved = torch.cuda.memory_reserved()
    with BreakableCUDAGraphCapture() as capture:
        copy_into(out, (x * 2).sum().expand_as(x))
        out.add_(1)
    steps = capture.segments
    assert capture.num_graphs == 2 and capture.num_eager_breaks == 1
    capture.reset()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved() == reserved
    step = next(s for s in steps if isinstance(s, EagerStep))
    with pytest.raises(RuntimeError, match="released"):
        step.replay()


@pytest.mark.parametrize("at_capture", ["tensor", "none"])
def test_break_returning_tensors_at_one_time_only_raises_at_replay(
    bcg_device: str, at_capture: str
) -> None:
    # A break that returned a tensor at capture must return one at replay, and one that
    # returned None must keep doing so: later graphs read the capture-time result.
    x = torch.ones(2, device=bcg_device)
    first = [True]

    @eager_break_during_capture
    def sometimes_a_tensor(t: torch.Tensor) -> torch.Tensor | None:
        returns_tensor = first[0] == (at_capture == "tensor")
        first[0] = False
        return t * 2 if returns_tensor else None

    with BreakableCUDAGraphCapture() as capture:
        sometimes_a_tensor(x)
    with pytest.raises(RuntimeError, match=r"returned \d tensors at replay but \d at capture"):
        capture.replay()


def test_runner_takes_fn_by_position_or_keyword_and_its_options_only_by_keyword(
    bcg_device: str,
) -> None:
    assert BreakableGraphRunner(fn=torch.neg).fn is torch.neg
    with pytest.raises(TypeError):
        BreakableGraphRunner(torch.neg, 2)  # type: ignore[misc]


def test_object_with_a_fields_attribute_that_is_no_tuple_is_a_leaf(bcg_device: str) -> None:
    # Only tuples with _fields are namedtuples; other objects (ast nodes, records) are held
    # whole, as any non-container argument.
    class Record:
        _fields = ("value",)

        def __init__(self, value: torch.Tensor) -> None:
            self.value = value

    @eager_break_during_capture
    def copy_from_record(out: torch.Tensor, record: Record) -> None:
        out.copy_(record.value)

    x = torch.ones(2, device=bcg_device)
    out = torch.empty_like(x)
    with BreakableCUDAGraphCapture() as capture:
        copy_from_record(out, Record(x))
    x.fill_(5)
    capture.replay()
    assert torch.equal(out, x)


def test_break_returning_its_result_in_another_layout_at_replay_is_copied_not_kept(
    bcg_device: str,
) -> None:
    # The same memory in another layout is not the capture-time result: the library copies
    # it back. On a GPU torch refuses that copy (the two overlap); the simulator makes it.
    square = torch.arange(4.0, device=bcg_device).reshape(2, 2)
    calls = [0]

    @eager_break_during_capture
    def square_or_transposed() -> torch.Tensor:
        calls[0] += 1
        return square if calls[0] == 1 else square.t()

    with BreakableCUDAGraphCapture() as capture:
        square_or_transposed()
    try:
        capture.replay()
    except RuntimeError as error:
        assert "single memory location" in str(error)
    else:  # the simulator's overlapping copy gives order-dependent values, but not these
        assert not torch.equal(square, torch.arange(4.0, device=bcg_device).reshape(2, 2))


def test_chain_opening_with_a_break_replays_its_fresh_result_into_the_graph_after_it(
    bcg_device: str,
) -> None:
    # Replay binds the first graph's launch ahead of the rest of the chain; a chain that opens
    # with an eager step must still have that step's result checked and copied back.
    x = torch.ones(4, device=bcg_device)

    @eager_break_during_capture
    def doubled(t: torch.Tensor) -> torch.Tensor:
        return t * 2

    with BreakableCUDAGraphCapture() as capture:
        y = doubled(x)
        out = y + 1
    assert (capture.num_eager_breaks, capture.num_graphs) == (1, 1)
    x.fill_(5.0)
    capture.replay()
    assert torch.equal(out, torch.full_like(x, 11.0))


def test_collector_is_off_while_a_capture_is_open_and_back_after_it_closes(
    bcg_device: str,
) -> None:
    # Freeing a captured graph inside an open capture breaks it on a GPU
    # (test_graph_semantics.py); the collector frees graphs held in cycles at any allocation.
    x = torch.ones(4, device=bcg_device)
    seen: list[bool] = []
    assert gc.isenabled()
    with BreakableCUDAGraphCapture():
        seen.append(gc.isenabled())
        x * 2
    seen.append(gc.isenabled())
    with pytest.raises(ValueError):
        with BreakableCUDAGraphCapture():
            seen.append(gc.isenabled())
            raise ValueError("abort")
    seen.append(gc.isenabled())
    with BreakableCUDAGraphCapture(enabled=False):
        seen.append(gc.isenabled())  # nothing is captured, nothing to protect
    assert seen == [False, True, False, True, True]


def test_collector_stays_off_until_the_last_of_two_threads_captures_closes(
    bcg_device: str,
) -> None:
    x = torch.ones(4, device=bcg_device)
    opened, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def other_thread() -> None:
        try:
            with BreakableCUDAGraphCapture(capture_error_mode="thread_local"):
                x + 1
                opened.set()
                release.wait(30)
        except BaseException as error:  # reported to the main thread
            errors.append(error)
            opened.set()

    thread = threading.Thread(target=other_thread)
    thread.start()
    opened.wait(30)
    with BreakableCUDAGraphCapture(capture_error_mode="thread_local"):
        x * 2
    still_off = not gc.isenabled()
    release.set()
    thread.join(30)
    assert not errors and still_off and gc.isenabled()


class _Marked(torch.Tensor):
    """A tensor subclass, as models carry (quantized or distributed tensor wrappers)."""


def test_tensor_subclass_made_in_the_pool_reaches_the_break_as_it_was_given(
    bcg_device: str,
) -> None:
    # Only plain tensors are aliased: an alias of a subclass would lose what the subclass
    # carries (here a Python attribute), so a subclass is held as it is.
    x = torch.ones(4, device=bcg_device)
    out = torch.empty_like(x)
    seen: list[tuple[type, object]] = []

    @eager_break_during_capture
    def record(t: torch.Tensor) -> None:
        seen.append((type(t), getattr(t, "tag", None)))
        out.copy_(t.as_subclass(torch.Tensor))

    with BreakableCUDAGraphCapture() as capture:
        marked = (x * 2).as_subclass(_Marked)
        marked.tag = "scale 2"
        record(marked)
    capture.replay()
    assert seen == [(_Marked, "scale 2")] * 2


def test_a_disabled_capture_that_raises_leaves_the_collector_pause_balanced(
    bcg_device: str,
) -> None:
    x = torch.ones(4, device=bcg_device)
    with pytest.raises(ValueError):
        with BreakableCUDAGraphCapture(enabled=False):
            raise ValueError("abort")
    seen: list[bool] = []
    with BreakableCUDAGraphCapture():
        seen.append(gc.isenabled())
        x * 2
    assert seen == [False] and gc.isenabled()


@pytest.mark.parametrize("at_capture", ["tensor", "none"])
def test_replaying_segment_by_segment_checks_what_each_break_returns(
    bcg_device: str, at_capture: str
) -> None:
    # capture.segments are public and each replays on its own, as the chain does.
    x = torch.ones(4, device=bcg_device)
    returns = {"value": at_capture}

    @eager_break_during_capture
    def sometimes(t: torch.Tensor) -> torch.Tensor | None:
        return t * 3 if returns["value"] == "tensor" else None

    with BreakableCUDAGraphCapture() as capture:
        y = x + 1
        got = sometimes(y)
        z = (got if got is not None else y) * 2
    x.fill_(2.0)
    for segment in capture.segments:
        segment.replay()
    if at_capture == "tensor":
        assert torch.equal(z, torch.full_like(x, 18.0))
    returns["value"] = "none" if at_capture == "tensor" else "tensor"
    steps = capture.segments
    with pytest.raises(RuntimeError, match="returned"):
        for segment in steps:
            segment.replay()
