"""Capture semantics measured on the H200 (torch 2.11, issue 26), one test per behaviour.

Like ``test_graph_semantics.py``, every test allocates on ``bcg_device`` and uses only real
``torch.cuda`` names, so the same assertions run on the simulator and on a GPU. Scenarios that
depend on what the process ran before (a cuSOLVER handle) or that once left a sticky CUDA
error behind run in a fresh process through ``bench/probes/capture_semantics.py``. Tests that
fail a capture end with a successful one: on a GPU a failed ``capture_end`` leaves the
generator in capture mode, and every later random op of the worker would raise.
"""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Iterator

import pytest
import torch

from bench.probes import capture_semantics

NOT_PERMITTED = "operation not permitted when stream is capturing"
PREVIOUS_ERROR = "operation failed due to a previous error during capture"
MERGE = "would result in a merge of separate capture sequences"
INVALID_ARGUMENT = "invalid argument"


def _side_stream() -> torch.cuda.Stream:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    return s


def _capture(fn, *args, pool=None, mode="global", stream=None):
    """Captures ``fn(*args)`` on a side stream; returns (graph, fn's result)."""
    g = torch.cuda.CUDAGraph()
    s = stream if stream is not None else _side_stream()
    with torch.cuda.stream(s):
        g.capture_begin(pool=pool, capture_error_mode=mode)
        out = fn(*args)
        g.capture_end()
    torch.cuda.current_stream().wait_stream(s)
    return g, out


def _recover(device: str) -> None:
    """A successful capture and replay: the generator leaves capture mode (see module doc)."""
    x = torch.ones(4, device=device)
    g, y = _capture(lambda: x + 1)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, torch.full_like(x, 2.0))


def _in_fresh_process(kind: str, scenario: str) -> dict:
    steps = capture_semantics.run(scenario, kind)
    assert steps["rc"] == 0, steps
    return steps


# 1: replay under a CUDA default device ------------------------------------------------------


@contextlib.contextmanager
def _default_device(how: str) -> Iterator[None]:
    if how == "with torch.device":
        with torch.device("cuda"):
            yield
        return
    previous = torch.get_default_device()
    torch.set_default_device("cuda")
    try:
        yield
    finally:
        torch.set_default_device(previous)


@pytest.mark.parametrize("how", ["with torch.device", "set_default_device"])
def test_capture_and_replay_under_a_cuda_default_device(bcg_device, how):
    with _default_device(how):
        x = torch.ones(4)
        lengths = torch.tensor([1, 2, 3])
        assert x.is_cuda and lengths.is_cuda
        g, y = _capture(lambda: x * 2 + lengths.sum())
        x.fill_(3)
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, torch.full((4,), 12.0))
        assert y.is_cuda


# 2: an out= tensor grown during a capture -----------------------------------------------------


def test_out_tensor_of_size_zero_grows_during_capture_and_replays(bcg_kind):
    # On 2026-11-30 the H200 failed this capture (and left an illegal access behind, with
    # `torch.add(x, 1, out=out)` on a 3x5 x); issue 26's probe saw it captured and replayed
    # right. A fresh process keeps a sticky error out of the worker either way.
    steps = _in_fresh_process(bcg_kind, "out_resize")
    assert steps["op"] == "ok"
    assert steps["shape_after_capture"] == [4]
    assert steps["end"] == "ok", steps
    assert steps["replay_right"] is True
    assert steps["later_op"] == 4.0


# 3, 4: events recorded inside a capture ----------------------------------------------------


def _events_recorded_in_a_capture(device: str, timing: bool):
    x = torch.ones(1024, device=device)
    start = torch.cuda.Event(enable_timing=timing)
    end = torch.cuda.Event(enable_timing=timing)

    def body():
        start.record()
        y = x * 2
        end.record()
        return y

    g, y = _capture(body)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, x * 2)
    return start, end


def test_elapsed_time_between_events_recorded_in_a_capture_raises(bcg_device):
    start, end = _events_recorded_in_a_capture(bcg_device, timing=True)
    with pytest.raises(RuntimeError, match=INVALID_ARGUMENT):
        start.elapsed_time(end)


@pytest.mark.parametrize("use", ["wait_event", "query", "synchronize"])
def test_an_event_recorded_in_a_capture_is_refused_after_it(bcg_device, use):
    _, end = _events_recorded_in_a_capture(bcg_device, timing=False)
    calls = {
        "wait_event": lambda: torch.cuda.current_stream().wait_event(end),
        "query": end.query,
        "synchronize": end.synchronize,
    }
    with pytest.raises(RuntimeError, match=INVALID_ARGUMENT):
        calls[use]()
    # The same event recorded again outside a capture is an ordinary event.
    end.record()
    torch.cuda.current_stream().wait_event(end)
    end.synchronize()
    assert end.query()


# 5, 6: two captures at once --------------------------------------------------------------------


def test_growth_in_one_of_two_global_captures_fails_both_at_their_ends(bcg_device):
    x = torch.ones(8, device=bcg_device)
    s1, s2 = _side_stream(), _side_stream()
    g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.stream(s1):
        g1.capture_begin()
        y = x + 1
    with torch.cuda.stream(s2):
        g2.capture_begin()
        big = torch.empty(1 << 28, dtype=torch.uint8, device=bcg_device)  # a new segment
        z = x * 2  # still accepted
        with pytest.raises(RuntimeError, match=NOT_PERMITTED):
            g2.capture_end()
    with torch.cuda.stream(s1), pytest.raises(RuntimeError, match=PREVIOUS_ERROR):
        g1.capture_end()
    torch.cuda.synchronize()
    del y, z, big
    _recover(bcg_device)


def test_merging_two_global_captures_fails_both(bcg_device):
    x = torch.ones(8, device=bcg_device)
    s1, s2 = _side_stream(), _side_stream()
    g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.stream(s1):
        g1.capture_begin()
        y = x + 1
        event = s1.record_event()
    with torch.cuda.stream(s2):
        g2.capture_begin()
        z = x * 2  # capture 2 allocates while capture 1 is open: capture 1 is invalidated
    with torch.cuda.stream(s1):
        x - 1  # the third op: accepted on the H200 (bench/probes/capture_semantics.py)
    with torch.cuda.stream(s2):
        with pytest.raises(RuntimeError, match=MERGE):
            s2.wait_event(event)
        with pytest.raises(RuntimeError):
            g2.capture_end()
    with torch.cuda.stream(s1), pytest.raises(RuntimeError, match=PREVIOUS_ERROR):
        g1.capture_end()
    torch.cuda.synchronize()
    del y, z
    _recover(bcg_device)


# 7: a capture CUDA invalidated keeps its memory ------------------------------------------------


def test_a_failed_capture_keeps_its_pool_reserved(bcg_device):
    x = torch.ones(1 << 20, device=bcg_device)
    gc.collect()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_reserved()
    s = _side_stream()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        g.capture_begin()
        y = x * 2
        with pytest.raises(RuntimeError, match=NOT_PERMITTED):
            y.sum().item()
        with pytest.raises(RuntimeError, match=PREVIOUS_ERROR):
            g.capture_end()
    torch.cuda.current_stream().wait_stream(s)
    del y
    gc.collect()
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved() - before >= x.numel() * x.element_size()
    _recover(bcg_device)


# 8: reference cycles and torch.cuda.graph -------------------------------------------------------


def test_torch_cuda_graph_does_not_collect_reference_cycles(bcg_device):
    x = torch.ones(16, device=bcg_device)
    enabled = gc.isenabled()
    gc.disable()  # only torch.cuda.graph may collect here
    try:
        held = torch.full((1024,), 5.0, device=bcg_device)
        cycle: list = [held]
        cycle.append(cycle)
        alive = weakref.ref(held)
        del held, cycle
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            seen = alive() is not None
            y = x + 1
    finally:
        if enabled:
            gc.enable()
    assert seen, "the tensor held by a cycle was collected at capture"
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, x + 1)
    gc.collect()
    assert alive() is None


# 9: autograd in a capture -------------------------------------------------------------------


def test_backward_inside_a_capture_accumulates_at_replay(bcg_device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    model = model.to(bcg_device)
    x = torch.randn(5, 8, device=bcg_device)
    s = _side_stream()
    with torch.cuda.stream(s):  # warm-up on a side stream, as torch's docs ask
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            model(x).square().sum().backward()
    torch.cuda.current_stream().wait_stream(s)
    model.zero_grad(set_to_none=False)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        loss = model(x).square().sum()
        loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(bool((gr == 0).all()) for gr in grads), "backward ran during capture"
    g.replay()
    torch.cuda.synchronize()
    replayed = [gr.clone() for gr in grads]
    model.zero_grad(set_to_none=True)
    eager_loss = model(x).square().sum()
    eager_loss.backward()
    torch.cuda.synchronize()
    torch.testing.assert_close(loss, eager_loss)
    for got, p in zip(replayed, model.parameters()):
        torch.testing.assert_close(got, p.grad)


def test_make_graphed_callables_gives_the_eager_gradients(bcg_device):
    torch.manual_seed(0)
    graphed_module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()).to(bcg_device)
    eager_module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()).to(bcg_device)
    eager_module.load_state_dict(graphed_module.state_dict())
    sample = torch.randn(4, 8, device=bcg_device, requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(graphed_module, (sample,))
    for seed in (1, 2):
        torch.manual_seed(seed)
        data = torch.randn(4, 8, device=bcg_device)
        a, b = data.clone().requires_grad_(), data.clone().requires_grad_()
        graphed_module.zero_grad(set_to_none=True)
        eager_module.zero_grad(set_to_none=True)
        out_graphed = graphed(a)
        out_graphed.square().sum().backward()
        out_eager = eager_module(b)
        out_eager.square().sum().backward()
        torch.cuda.synchronize()
        torch.testing.assert_close(out_graphed, out_eager)
        torch.testing.assert_close(a.grad, b.grad)
        for p, q in zip(graphed_module.parameters(), eager_module.parameters()):
            torch.testing.assert_close(p.grad, q.grad)


# 10: cuSOLVER in a capture --------------------------------------------------------------------


def test_linalg_inv_in_a_fresh_process_fails_its_capture_with_cusolvers_error(bcg_kind):
    steps = _in_fresh_process(bcg_kind, "linalg_inv")
    assert "CUSOLVER_STATUS_INTERNAL_ERROR" in steps["op"], steps
    assert PREVIOUS_ERROR in steps["end"] or NOT_PERMITTED in steps["end"], steps
    assert steps["eager_after"] == 2.0


# 11: API surface ---------------------------------------------------------------------------------


@pytest.mark.parametrize("keep_graph", [False, True], ids=["default", "keep_graph"])
def test_debug_dump_writes_only_a_kept_graph(bcg_device, tmp_path, keep_graph):
    # On the H200 (bench/probes/debug_dump.py) torch destroys the cudaGraph_t at
    # instantiation unless the graph was made with keep_graph=True; debug_dump then only warns.
    x = torch.ones(1024, device=bcg_device)
    g = torch.cuda.CUDAGraph(keep_graph=keep_graph)
    g.enable_debug_mode()
    s = _side_stream()
    with torch.cuda.stream(s):
        g.capture_begin()
        y = x + 1
        g.capture_end()
    torch.cuda.current_stream().wait_stream(s)
    if keep_graph:  # a kept graph is instantiated only when asked (or at its first replay)
        with pytest.raises(RuntimeError, match="until instantiate"):
            g.raw_cuda_graph_exec()
        g.instantiate()
    assert isinstance(g.raw_cuda_graph_exec(), int)
    dump = tmp_path / "graph.dot"
    with pytest.warns(UserWarning, match="DEBUG: calling debug_dump") as caught:
        g.debug_dump(str(dump))
    printed = any("cudaGraphDebugDotPrint" in str(w.message) for w in caught)
    assert printed == keep_graph == (dump.exists() and dump.stat().st_size > 0)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, x + 1)


def test_default_capture_stream_peak_memory_and_default_generator(bcg_device):
    side = torch.cuda.graph(torch.cuda.CUDAGraph())
    assert isinstance(torch.cuda.graph.default_capture_stream, torch.cuda.Stream)
    assert side.capture_stream == torch.cuda.graph.default_capture_stream

    torch.cuda.reset_peak_memory_stats()
    block = torch.ones(1 << 20, device=bcg_device)
    del block
    assert torch.cuda.max_memory_allocated() >= 4 << 20

    generator = torch.cuda.default_generators[0]
    generator.manual_seed(123)
    first = torch.rand(8, device=bcg_device)
    generator.manual_seed(123)
    assert torch.equal(torch.rand(8, device=bcg_device), first)
    assert generator.initial_seed() == 123 == torch.cuda.initial_seed()


def test_a_failed_capture_leaves_the_default_generator_capturing_until_a_clean_one(bcg_device):
    # H200 (bench/probes/generator_after_failure.py, debug_dump.py): torch skips the
    # generator's capture epilogue when capture_end fails, so every random op outside a capture
    # raises until some capture ends cleanly.
    x = torch.ones(16, device=bcg_device)
    s = _side_stream()
    with torch.cuda.stream(s):
        bad = torch.cuda.CUDAGraph()
        bad.capture_begin()
        x * 2
        with pytest.raises(RuntimeError, match="operation not permitted when stream is capturing"):
            torch.cuda.synchronize()
        with pytest.raises(RuntimeError, match="previous error during capture"):
            bad.capture_end()
    with pytest.raises(RuntimeError, match="Offset increment outside graph capture"):
        torch.rand(4, device=bcg_device)
    good = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        good.capture_begin()
        x + 1
        good.capture_end()
    torch.rand(4, device=bcg_device)
    torch.cuda.synchronize()


# 12: error messages ------------------------------------------------------------------------------


def test_capture_end_without_capture_begin_is_an_illegal_state(bcg_device):
    g = torch.cuda.CUDAGraph()
    with pytest.raises(
        RuntimeError, match="the operation cannot be performed in the present state"
    ):
        g.capture_end()
    assert not torch.cuda.is_current_stream_capturing()


def test_pool_before_any_capture_names_the_missing_capture(bcg_device):
    g = torch.cuda.CUDAGraph()
    with pytest.raises(
        RuntimeError,
        match=r"Called CUDAGraph::pool\(\) without a preceding successful capture",
    ):
        g.pool()


def test_a_second_capture_begin_of_the_same_graph_raises_torchs_register_error(bcg_kind):
    steps = _in_fresh_process(bcg_kind, "begin_twice")
    assert "Cannot register the state during capturing stage" in steps["second_begin"], steps
    assert steps["end"] == "ok"
    assert steps["replay_right"] is True
    assert steps["freed"] == "survived"


# 13: races: the simulator's detector and a GPU amplifier agree -------------------------------

# About 10 ms on an H200: the side stream's work lands long after the host issues the next op.
_SLEEP_CYCLES = 20_000_000
_RACE_ELEMENTS = 1 << 22


class _Verdict:
    race: bool | None = None


@contextlib.contextmanager
def _judged(kind: str) -> Iterator[_Verdict]:
    """The race verdict of the block: on the simulator, whether its detector raised; on a
    GPU, what the block concludes from the values the amplified race left behind."""
    verdict = _Verdict()
    if kind == "cuda":
        yield verdict
        return
    from verification.sim import StreamRaceError, detect_races

    try:
        with detect_races():
            yield verdict
    except StreamRaceError:
        verdict.race = True


def _late(kind: str) -> None:
    if kind == "cuda":
        torch.cuda._sleep(_SLEEP_CYCLES)


# On a GPU shared by a suite's workers, another process's time slice can swallow the sleep
# (it counts clock cycles, which run on while the context is switched out), so a race is
# judged shown if any of a few tries shows it; an ordered read must show none in all of them.
_TRIES = 3


@pytest.mark.parametrize("ordered", [False, True], ids=["no-wait", "wait_stream"])
def test_reading_a_side_stream_write(bcg_device, bcg_kind, ordered):
    races = []
    for _ in range(_TRIES):
        x = torch.ones(_RACE_ELEMENTS, device=bcg_device)
        side = _side_stream()
        torch.cuda.synchronize()
        with _judged(bcg_kind) as verdict:
            with torch.cuda.stream(side):
                _late(bcg_kind)
                x.mul_(2)
            if ordered:
                torch.cuda.current_stream().wait_stream(side)
            total = x.sum()
            torch.cuda.synchronize()
            verdict.race = verdict.race or total.item() != 2 * _RACE_ELEMENTS
        torch.cuda.synchronize()
        races.append(bool(verdict.race))
        if races[-1]:
            break
    assert any(races) is (not ordered), races


@pytest.mark.parametrize("recorded", [False, True], ids=["no-record_stream", "record_stream"])
def test_freeing_a_tensor_another_stream_still_reads(bcg_device, bcg_kind, recorded):
    side = _side_stream()
    races = []
    for _ in range(_TRIES):
        torch.cuda.synchronize()
        with _judged(bcg_kind) as verdict:
            x = torch.ones(_RACE_ELEMENTS, device=bcg_device)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                _late(bcg_kind)
                y = x * 2  # reads x late
            if recorded:
                x.record_stream(side)
            del x
            z = torch.full((_RACE_ELEMENTS,), 7.0, device=bcg_device)  # may take x's block
            torch.cuda.synchronize()
            verdict.race = not bool((y == 2).all())
            del z
        torch.cuda.synchronize()
        races.append(verdict.race)
    assert any(races) is (not recorded), races
