"""Tests for BreakableCUDAGraphCapture: segment chains, streams, pools, empty graphs, aborts,
and the collector paused while a capture is open."""

from __future__ import annotations

import gc
import threading
import warnings

import pytest
import torch

import breakable_cudagraph as bcg
from breakable_cudagraph import BreakableCUDAGraphCapture, eager_break_during_capture
from breakable_cudagraph.segments import EagerStep


def _plus_one(t: torch.Tensor) -> torch.Tensor:
    return t + 1


def test_chain_of_segments_replays_correct_results_for_new_inputs(bcg_device: str) -> None:
    x = torch.zeros(8, device=bcg_device)
    capture = BreakableCUDAGraphCapture()
    with capture:
        y = x * 2
        z = capture.add_eager(lambda: _plus_one(y))
        w = z * 3
    assert capture.num_graphs == 2
    assert capture.num_eager_breaks == 1
    assert [type(s).__name__ for s in capture.segments] == [
        "GraphSegment",
        "EagerStep",
        "GraphSegment",
    ]
    for value in (1.0, 2.0, -4.0):
        x.fill_(value)
        capture.replay()
        assert torch.equal(w, torch.full_like(w, (2 * value + 1) * 3))


def test_eager_steps_run_exactly_once_per_replay_in_order(bcg_device: str) -> None:
    x = torch.ones(4, device=bcg_device)
    log: list[str] = []
    capture = BreakableCUDAGraphCapture()
    with capture:
        y = x + 1
        capture.add_eager(lambda: log.append("a"))
        y = y * 2
        capture.add_eager(lambda: log.append("b"))
        y = y - 1
    assert log == ["a", "b"]
    for _ in range(3):
        capture.replay()
    assert log == ["a", "b"] * 4


def test_nested_capture_raises_and_leaves_outer_intact(bcg_device: str) -> None:
    x = torch.zeros(4, device=bcg_device)
    outer = BreakableCUDAGraphCapture()
    with outer:
        y = x + 1
        with pytest.raises(RuntimeError, match="Nested"), BreakableCUDAGraphCapture():
            pass
        assert BreakableCUDAGraphCapture.current() is outer
        outer.add_eager(lambda: None)
        z = y * 5
    x.fill_(2.0)
    outer.replay()
    assert torch.equal(z, torch.full_like(z, 15.0))


def test_capture_inside_a_torch_cuda_graph_is_refused_before_any_graph_begins(
    bcg_device: str,
) -> None:
    # Without the check the side stream joins the outer capture and capture_begin fails on
    # it, leaving a CUDAGraph that aborts the process when freed (H200, torch 2.11).
    x = torch.zeros(4, device=bcg_device)
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        graph.capture_begin()
        y = x + 1
        with pytest.raises(RuntimeError, match="already capturing"):
            with BreakableCUDAGraphCapture():
                pass
        assert BreakableCUDAGraphCapture.current() is None
        z = y * 3
        graph.capture_end()
    torch.cuda.current_stream().wait_stream(side)
    x.fill_(1.0)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(z, torch.full_like(z, 6.0))


def test_current_and_is_active_track_the_open_capture(bcg_device: str) -> None:
    assert BreakableCUDAGraphCapture.current() is None
    capture = BreakableCUDAGraphCapture()
    with capture:
        assert BreakableCUDAGraphCapture.current() is capture
        assert BreakableCUDAGraphCapture.is_active()
        torch.ones(2, device=bcg_device).add_(1)
    assert not BreakableCUDAGraphCapture.is_active()


def test_entry_from_default_stream_captures_on_side_stream_and_restores(bcg_device: str) -> None:
    caller = torch.cuda.current_stream()
    assert caller == torch.cuda.default_stream()
    x = torch.ones(4, device=bcg_device)
    capture = BreakableCUDAGraphCapture()
    with capture:
        assert torch.cuda.current_stream() == capture.stream
        assert capture.stream != caller
        y = x * 4
    assert torch.cuda.current_stream() == caller
    x.fill_(3.0)
    capture.replay()
    assert torch.equal(y, torch.full_like(y, 12.0))


def test_given_stream_is_used_for_capture(bcg_device: str) -> None:
    side = torch.cuda.Stream()
    capture = BreakableCUDAGraphCapture(stream=side)
    x = torch.ones(2, device=bcg_device)
    with capture:
        assert torch.cuda.current_stream() == side
        y = x + 1
    x.fill_(5.0)
    capture.replay()
    assert torch.equal(y, torch.full_like(y, 6.0))


def test_entry_from_a_side_stream_captures_on_it(bcg_device: str) -> None:
    # A chain captured on a stream of its own replays every kernel slower on the caller's
    # (measured on an H200), so a caller already on a capturable stream keeps it, as vLLM does.
    caller = torch.cuda.Stream()
    x = torch.ones(4, device=bcg_device)
    seen: list[torch.cuda.Stream] = []
    with torch.cuda.stream(caller):
        capture = BreakableCUDAGraphCapture()
        with capture:
            y = x * 2
            capture.add_eager(lambda: seen.append(torch.cuda.current_stream()))
            z = y + 1
        assert capture.stream == caller
        assert seen == [caller]  # the eager step ran on the stream that will replay it
        assert torch.cuda.current_stream() == caller
        x.fill_(3.0)
        capture.replay()
    torch.cuda.synchronize()
    assert torch.equal(z, torch.full_like(z, 7.0))
    assert seen == [caller, caller]


def test_pool_is_shared_across_captures(bcg_device: str) -> None:
    x = torch.zeros(16, device=bcg_device)
    first = BreakableCUDAGraphCapture()
    with first:
        a = x + 1
        first.add_eager(lambda: None)
        b = a * 2
    second = BreakableCUDAGraphCapture(pool=first.pool)
    assert second.pool == first.pool
    with second:
        c = b + 10
    x.fill_(1.0)
    first.replay()
    second.replay()
    assert torch.equal(b, torch.full_like(b, 4.0))
    assert torch.equal(c, torch.full_like(c, 14.0))


@pytest.mark.parametrize(
    ("layout", "graphs"),
    [
        ("BBWBB", 1),  # breaks first, last and adjacent around one piece of work
        ("WBBW", 2),
        ("BB", 0),
        ("", 0),
        ("W", 1),
    ],
)
def test_no_empty_graph_segments_and_no_empty_graph_warning(
    bcg_device: str, layout: str, graphs: int
) -> None:
    x = torch.ones(4, device=bcg_device)
    calls: list[int] = []
    capture = BreakableCUDAGraphCapture()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with capture:
            for step in layout:
                if step == "B":
                    capture.add_eager(lambda: calls.append(1))
                else:
                    x.mul_(2)
        capture.replay()
    assert capture.num_graphs == graphs
    assert capture.num_eager_breaks == layout.count("B")
    assert not [w for w in caught if "empty" in str(w.message).lower()]
    assert len(calls) == 2 * layout.count("B")


def test_exception_in_body_aborts_cleanly_and_next_capture_works(bcg_device: str) -> None:
    caller = torch.cuda.current_stream()
    x = torch.ones(4, device=bcg_device)
    failed = BreakableCUDAGraphCapture()
    with pytest.raises(ValueError, match="boom"), failed:
        x * 2
        failed.add_eager(lambda: None)
        x + 1
        raise ValueError("boom")
    _assert_clean_after_abort(failed, caller, bcg_device)


def test_exception_in_eager_step_aborts_cleanly_and_next_capture_works(bcg_device: str) -> None:
    caller = torch.cuda.current_stream()
    x = torch.ones(4, device=bcg_device)

    def explode() -> None:
        raise KeyError("eager step failed")

    failed = BreakableCUDAGraphCapture()
    with pytest.raises(KeyError, match="eager step failed"), failed:
        x * 2
        failed.add_eager(explode)
    _assert_clean_after_abort(failed, caller, bcg_device)


def test_item_during_capture_raises_and_aborts_cleanly(bcg_device: str) -> None:
    caller = torch.cuda.current_stream()
    x = torch.ones(4, device=bcg_device)
    failed = BreakableCUDAGraphCapture()
    with pytest.raises(RuntimeError, match="capturing") as raised, failed:
        y = x * 2
        y.sum().item()
    # The invalidated segment's capture_end fails too; that is attached, never raised instead.
    notes = getattr(raised.value, "__notes__", [])
    assert any("ending the open graph segment" in note for note in notes) or not hasattr(
        raised.value, "add_note"
    )
    _assert_clean_after_abort(failed, caller, bcg_device)


def test_an_invalidated_capture_says_its_pool_is_lost_and_a_new_pool_works(bcg_device: str) -> None:
    # torch cannot capture into a pool again once CUDA invalidated a capture into it
    # (tests/sim/test_graph_semantics.py); the exception says so and names the way out.
    x = torch.ones(4, device=bcg_device)
    failed = BreakableCUDAGraphCapture()
    with pytest.raises(RuntimeError) as raised, failed:
        x * 2
        torch.cuda.synchronize()
    notes = getattr(raised.value, "__notes__", [])
    assert any("already recording to mempool_id" in note and "new pool" in note for note in notes)
    with pytest.raises(RuntimeError, match="already recording"):
        with BreakableCUDAGraphCapture(pool=failed.pool):
            pass
    assert not BreakableCUDAGraphCapture.is_active()
    again = BreakableCUDAGraphCapture()
    with again:
        y = x + 1
        again.add_eager(lambda: None)
        z = y * 3
    x.fill_(4.0)
    again.replay()
    assert torch.equal(z, torch.full_like(z, 15.0))


def test_swallowed_eager_step_exception_fails_the_capture(bcg_device: str) -> None:
    x = torch.ones(4, device=bcg_device)

    def explode() -> None:
        raise KeyError("swallowed")

    failed = BreakableCUDAGraphCapture()
    with pytest.raises(RuntimeError, match="incomplete"), failed:
        x * 2
        try:
            failed.add_eager(explode)
        except KeyError:
            pass
    _assert_clean_after_abort(failed, torch.cuda.current_stream(), bcg_device)


def _assert_clean_after_abort(failed, caller, device: str) -> None:
    assert not BreakableCUDAGraphCapture.is_active()
    assert torch.cuda.current_stream() == caller
    assert not torch.cuda.is_current_stream_capturing()
    with pytest.raises(RuntimeError, match="failed"):
        failed.replay()
    x = torch.ones(4, device=device)
    capture = BreakableCUDAGraphCapture()
    with capture:
        y = x + 1
        capture.add_eager(lambda: None)
        z = y * 3
    x.fill_(2.0)
    capture.replay()
    assert torch.equal(z, torch.full_like(z, 9.0))


def test_replay_refuses_before_capture_inside_block_and_after_reset(bcg_device: str) -> None:
    x = torch.ones(2, device=bcg_device)
    capture = BreakableCUDAGraphCapture()
    with pytest.raises(RuntimeError, match="nothing has been captured"):
        capture.replay()
    with capture:
        x.add_(1)
        with pytest.raises(RuntimeError, match="inside the capture"):
            capture.replay()
    capture.reset()
    assert capture.num_graphs == 0
    assert capture.segments == []
    with pytest.raises(RuntimeError, match="reset"):
        capture.replay()


def test_capture_object_cannot_be_entered_twice(bcg_device: str) -> None:
    capture = BreakableCUDAGraphCapture()
    with capture:
        torch.ones(2, device=bcg_device).add_(1)
    with pytest.raises(RuntimeError, match="only once"), capture:
        pass
    capture.replay()


def test_bad_arguments_raise_clear_errors(bcg_device: str) -> None:
    with pytest.raises(ValueError, match="capture_error_mode"):
        BreakableCUDAGraphCapture(capture_error_mode="sometimes")
    capture = BreakableCUDAGraphCapture()
    with capture:
        torch.ones(2, device=bcg_device).add_(1)
        with pytest.raises(TypeError, match="callable"):
            capture.add_eager(42)  # type: ignore[arg-type]
        torch.ones(2, device=bcg_device).add_(1)
    with pytest.raises(RuntimeError, match="inside `with capture:`"):
        capture.add_eager(lambda: None)


def test_preparation_runs_once_per_capture_not_per_segment(
    bcg_device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    counts = {"synchronize": 0, "stream_sync": 0, "empty_cache": 0, "gc": 0}

    def counting(name, original):
        def wrapper(*args, **kwargs):
            counts[name] += 1
            return original(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(torch.cuda, "synchronize", counting("synchronize", torch.cuda.synchronize))
    monkeypatch.setattr(torch.cuda, "empty_cache", counting("empty_cache", torch.cuda.empty_cache))
    monkeypatch.setattr(gc, "collect", counting("gc", gc.collect))
    stream_type = type(torch.cuda.current_stream())
    monkeypatch.setattr(
        stream_type, "synchronize", counting("stream_sync", stream_type.synchronize)
    )
    x = torch.ones(4, device=bcg_device)
    capture = BreakableCUDAGraphCapture()
    with capture:
        for _ in range(3):
            x.add_(1)
            capture.add_eager(lambda: None)
    # Nothing by default (it cost 0.3 ms per capture); with gc_collect once per
    # capture, and a stream sync, never a device-wide one: that breaks other threads' captures.
    assert counts == {"synchronize": 0, "stream_sync": 0, "empty_cache": 0, "gc": 0}
    with BreakableCUDAGraphCapture(gc_collect=True) as second:
        x.add_(1)
        second.add_eager(lambda: None)
        x.add_(1)
        second.add_eager(lambda: None)
    assert counts == {"synchronize": 0, "stream_sync": 1, "empty_cache": 1, "gc": 1}


def test_public_api_is_exported(bcg_device: str) -> None:
    for name in bcg.__all__:
        assert hasattr(bcg, name)


def test_capture_is_visible_only_in_the_thread_that_opened_it(bcg_device: str) -> None:
    seen: list[object] = []
    capture = BreakableCUDAGraphCapture()
    with capture:
        torch.ones(2, device=bcg_device).add_(1)
        worker = threading.Thread(target=lambda: seen.append(BreakableCUDAGraphCapture.current()))
        worker.start()
        worker.join()
    assert seen == [None]


def test_random_ops_work_after_an_invalidated_capture(bcg_device: str) -> None:
    # torch leaves the CUDA generator in capture mode when capture_end fails; the abort
    # clears it, or every random op outside a capture would raise "Offset increment".
    x = torch.ones(4, device=bcg_device)
    with pytest.raises(RuntimeError), BreakableCUDAGraphCapture():
        x * 2
        torch.cuda.synchronize()
    assert torch.rand(4, device=bcg_device).shape == (4,)


@eager_break_during_capture
def copy_into(out: torch.Tensor, src: torch.Tensor) -> None:
    out.copy_(src)


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
    # (tests/sim/test_graph_semantics.py); the collector frees graphs held in cycles at any
    # allocation.
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


def _capture_in_other_thread(mode: str, x: torch.Tensor) -> BaseException | None:
    """Opens a capture of ``x * 2`` in another thread; what it raised, if any. (``x`` is made
    here: an allocation in another thread would end a global-mode capture itself.)"""
    raised: list[BaseException | None] = [None]

    def other() -> None:
        try:
            with BreakableCUDAGraphCapture(capture_error_mode=mode):
                x * 2
        except RuntimeError as error:
            raised[0] = error

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(60)
    return raised[0]


@pytest.mark.parametrize(
    ("mine", "theirs"), [("global", "thread_local"), ("thread_local", "global")]
)
def test_a_global_mode_capture_overlapping_another_threads_is_refused_before_any_graph(
    bcg_device: str, mine: str, theirs: str
) -> None:
    x = torch.ones(4, device=bcg_device)
    with BreakableCUDAGraphCapture(capture_error_mode=mine):
        y = x * 2
        refused = _capture_in_other_thread(theirs, x)
    assert refused is not None and "capture_error_mode='thread_local'" in str(refused)
    # Once the first capture is closed the other thread captures again.
    assert _capture_in_other_thread(theirs, x) is None
    del y


def test_thread_local_captures_overlap_other_threads_captures(bcg_device: str) -> None:
    x = torch.ones(4, device=bcg_device)
    with BreakableCUDAGraphCapture(capture_error_mode="thread_local"):
        y = x * 2
        assert _capture_in_other_thread("thread_local", x) is None
        assert _capture_in_other_thread("relaxed", x) is None
    del y
