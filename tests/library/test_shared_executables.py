"""Shared executables: captures of one pool whose segments at one position launch the same
kernels share one instantiated executable, switched by ``cudaGraphExecUpdate`` when another
capture replays; every size still replays as eager, bit for bit, in any order."""

from __future__ import annotations

import gc
import sys

import pytest
import torch

from breakable_cudagraph import (
    BreakableCUDAGraphCapture,
    CaptureSet,
    eager_break_during_capture,
    executables,
)
from breakable_cudagraph.segments import GraphSegment

HIDDEN = 8
SIZES = (1, 2, 3, 4, 8, 16)


SCALE = [3.0]  # a host value the caller may change between calls


@eager_break_during_capture
def scale_rows(h: torch.Tensor, out: torch.Tensor) -> None:
    """Reads a host value at every call: a break."""
    out.copy_(h * SCALE[0])


def _model(device: str):
    g = torch.Generator().manual_seed(0)
    w1 = torch.randn(HIDDEN, HIDDEN, generator=g).to(device)
    w2 = torch.randn(HIDDEN, HIDDEN, generator=g).to(device)

    def step(x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(x @ w1)
        out = torch.empty_like(h)
        scale_rows(h, out)
        return torch.sigmoid(out @ w2) + h

    return step


def _shared(capture: BreakableCUDAGraphCapture) -> list[object]:
    return [s.shared for s in capture.segments if isinstance(s, GraphSegment)]


def _updates(monkeypatch: pytest.MonkeyPatch, refuse: bool = False) -> list[int]:
    """Counts (or refuses) every cudaGraphExecUpdate from now on."""
    cudart = executables.runtime()
    assert cudart is not None
    made: list[int] = []
    update = cudart.cudaGraphExecUpdate

    def counted(exe: object, graph: object) -> tuple[object, ...]:
        made.append(1)
        if refuse:
            return (cudart.cudaError_t.cudaErrorGraphExecUpdateFailure, None)
        return update(exe, graph)

    monkeypatch.setattr(sys.modules[cudart.__name__], "cudaGraphExecUpdate", counted)
    return made


def test_a_sharing_capture_set_replays_every_size_bit_for_bit_as_eager_in_any_order(
    bcg_device: str,
) -> None:
    step = _model(bcg_device)
    captured = CaptureSet(
        step, SIZES, (torch.zeros(1, HIDDEN, device=bcg_device),), share_executables=True
    )
    shared = [_shared(capture) for capture in captured.captures]
    everywhere = [s for per_capture in shared for s in per_capture]
    # Sizes whose matrix products launch the same kernels share; the others each own one.
    assert all(s is not None for s in everywhere)
    assert len({id(s) for s in everywhere}) < len(everywhere)
    assert len({id(s) for s in shared[-1]} | {id(s) for s in shared[0]}) == 2 * len(shared[0])
    for n in (1, 16, 1, 3, 4, 2, 16, 2, 8, 1, 5):
        x = torch.randn(n, HIDDEN, device=bcg_device)
        assert torch.equal(captured(x), step(x)), n


def _two_sizes_sharing(device: str):
    """A set of sizes 3 and 2, whose products launch the same kernels: they share everything."""
    step = _model(device)
    captured = CaptureSet(
        step, (3, 2), (torch.zeros(1, HIDDEN, device=device),), share_executables=True
    )
    assert _shared(captured.captures[0]) == _shared(captured.captures[1])
    return step, captured


def test_one_size_replayed_again_and_again_switches_the_executable_once(
    bcg_device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, captured = _two_sizes_sharing(bcg_device)
    x = torch.randn(2, HIDDEN, device=bcg_device)
    made = _updates(monkeypatch)
    for _ in range(5):
        captured(x)
    assert len(made) == 2  # the size-2 capture's two segments, on the first call only
    captured(torch.randn(3, HIDDEN, device=bcg_device))
    assert len(made) == 4


def test_an_update_refused_at_launch_gives_the_segment_its_own_executable(
    bcg_device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    step, captured = _two_sizes_sharing(bcg_device)
    made = _updates(monkeypatch, refuse=True)
    one, two = (torch.randn(n, HIDDEN, device=bcg_device) for n in (2, 3))
    assert torch.equal(captured(one), step(one))  # refused: size 2 runs an executable of its own
    assert torch.equal(captured(two), step(two))  # the shared one still holds size 3's
    refused = len(made)
    assert torch.equal(captured(one), step(one))
    assert len(made) == refused  # not asked again


def test_a_shared_executable_outlives_the_capture_that_made_it_while_others_use_it(
    bcg_device: str,
) -> None:
    pool = torch.cuda.graph_pool_handle()
    x = torch.randn(4, HIDDEN, device=bcg_device)
    captures = []
    for rows in (1, 1):  # the same kernels at every position: the second joins the first
        with BreakableCUDAGraphCapture(pool=pool, share_executables=True) as capture:
            out = torch.empty_like(x[:rows])
            scale_rows(torch.tanh(x[:rows]), out)
            y = out * 2
        captures.append((capture, y))
    (first, _), (second, y) = captures
    assert _shared(first) == _shared(second) and _shared(first)[0] is not None
    owner = _shared(first)[0].owner
    first.reset()
    second.replay()
    assert torch.equal(y, torch.tanh(x[:1]) * SCALE[0] * 2)
    assert owner.raw_cuda_graph_exec()  # still instantiated: the second capture uses it
    second.reset()
    gc.collect()
    with pytest.raises(RuntimeError):
        owner.raw_cuda_graph_exec()  # released with its last user


def test_sharing_asked_for_without_cudas_graph_api_is_refused_before_any_capture(
    bcg_device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(executables, "runtime", lambda: None)
    with pytest.raises(RuntimeError, match="cuda-bindings"):
        BreakableCUDAGraphCapture(share_executables=True)
    with pytest.raises(RuntimeError, match="cuda-bindings"):
        CaptureSet(
            lambda x: x * 2, (2, 1), (torch.zeros(1, 2, device=bcg_device),), share_executables=True
        )
    with pytest.raises(TypeError, match="share_executables"):
        BreakableCUDAGraphCapture(share_executables="yes")  # type: ignore[arg-type]
    # Off by default; the environment turns it on where the caller does not say.
    monkeypatch.delenv(executables.SHARE_ENV, raising=False)
    assert not BreakableCUDAGraphCapture().share_executables
    monkeypatch.setenv(executables.SHARE_ENV, "1")
    assert BreakableCUDAGraphCapture().share_executables
    assert not BreakableCUDAGraphCapture(share_executables=False).share_executables
