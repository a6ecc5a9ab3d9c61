"""The simulator's stream race detector: each test plants one ordering bug and expects it
reported (naming both accesses), and the fixed program to pass.

These tests enter ``simulated_cuda()`` themselves: race detection is a simulator feature
(on a GPU the same programs are undefined behaviour, not an error).
"""

from __future__ import annotations

import pytest
import torch

from verification.sim import StreamRaceError, detect_races, simulated_cuda


@pytest.fixture
def races(bcg_kind):
    if bcg_kind == "cuda":
        # The simulator inside a GPU worker shares that process with real captures; these
        # verdicts are the simulator's own, and the GPU's agree in test_capture_semantics_h200.
        pytest.skip("checks the CUDA simulator itself; this run is on a real GPU")
    with simulated_cuda(), detect_races() as detector:
        yield detector


def test_read_of_a_side_stream_write_without_a_wait_is_a_race(races):
    x = torch.ones(256, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x.mul_(2)
    with pytest.raises(StreamRaceError) as caught:
        x.sum()
    error = caught.value
    assert error.current.kind == "read" and error.previous.kind == "write"
    assert error.previous.stream == side.stream_id
    assert "aten.mul_" in str(error) and "aten.sum" in str(error)


def test_wait_stream_or_event_orders_the_side_stream_write(races):
    x = torch.ones(256, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x.mul_(2)
        done = torch.cuda.Event()
        done.record()
    torch.cuda.current_stream().wait_event(done)
    assert x.sum().item() == 512
    with torch.cuda.stream(side):
        x.add_(1)
    torch.cuda.current_stream().wait_stream(side)
    assert x.sum().item() == 768


def test_write_after_an_unordered_read_is_a_race(races):
    x = torch.ones(256, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2
    with pytest.raises(StreamRaceError, match=r"write by aten\.fill_"):
        x.fill_(0)
    del y


def test_host_synchronize_orders_every_stream(races):
    x = torch.ones(256, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x.mul_(2)
    torch.cuda.synchronize()
    assert x.sum().item() == 512


def test_freed_memory_reused_without_record_stream_is_a_race(races):
    side = torch.cuda.Stream()
    x = torch.ones(1024, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2  # side reads x; the default stream never waits for it
    del x
    with pytest.raises(StreamRaceError, match="reusing freed memory"):
        torch.empty(1024, device="cuda")
    del y


def test_record_stream_makes_reuse_of_freed_memory_safe(races):
    side = torch.cuda.Stream()
    x = torch.ones(1024, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2
    x.record_stream(side)
    del x
    z = torch.zeros(1024, device="cuda")
    assert z.sum().item() == 0
    del y


def _capture(fn):
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        g.capture_begin()
        out = fn()
        g.capture_end()
    torch.cuda.current_stream().wait_stream(s)
    return g, out


class _ReplaysOnItsOwnStream:
    """A planted bug: replays segments and eager steps on a private stream and returns
    without making the caller's stream wait for it."""

    def __init__(self, graph, eager):
        self.graph, self.eager = graph, eager
        self.stream = torch.cuda.Stream()

    def replay(self, join: bool):
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            self.graph.replay()
            self.eager()
        if join:
            torch.cuda.current_stream().wait_stream(self.stream)


@pytest.mark.parametrize("join", [False, True], ids=["never-waited", "joined"])
def test_eager_step_on_an_unwaited_stream_is_found_through_graph_replay(races, join):
    x = torch.ones(64, device="cuda")
    g, y = _capture(lambda: x * 3)
    out = torch.empty(64, device="cuda")
    impl = _ReplaysOnItsOwnStream(g, lambda: out.copy_(y + 1))
    impl.replay(join)
    if join:
        assert out.sum().item() == 64 * 4
        return
    with pytest.raises(StreamRaceError) as caught:
        out.sum()
    assert caught.value.previous.stream == impl.stream.stream_id


def test_race_inside_a_replayed_graph_segment_names_the_replay(races):
    x = torch.ones(64, device="cuda")
    g, y = _capture(lambda: x * 3)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x.add_(1)  # the replay below reads x without waiting for this write
    with pytest.raises(StreamRaceError, match=r"graph replay"):
        g.replay()
    del y


def test_detection_is_off_unless_asked():
    with simulated_cuda():
        x = torch.ones(16, device="cuda")
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            x.mul_(2)
        assert x.sum().item() == 32
