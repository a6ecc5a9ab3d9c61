"""A break at replay sees what an eager run of the region would show it: the ambient state its
region set around the call, the caller's own containers, and its tensors' Python attributes."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from breakable_cudagraph import BreakableCUDAGraphCapture, eager_break_during_capture


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    was = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(was)


# (what a region sets around one break, what the break reads of it)
AMBIENT: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
    "autocast cuda": (
        lambda: torch.autocast("cuda", dtype=torch.bfloat16),
        lambda: (torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")),
    ),
    "autocast cpu": (
        lambda: torch.autocast("cpu", dtype=torch.float16),
        lambda: (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")),
    ),
    "no_grad": (torch.no_grad, torch.is_grad_enabled),
    "inference_mode": (
        torch.inference_mode,
        lambda: (torch.is_inference_mode_enabled(), torch.is_grad_enabled()),
    ),
    "default dtype": (lambda: default_dtype(torch.float64), torch.get_default_dtype),
    "device context": (lambda: torch.device("cuda"), lambda: torch.empty(0).device.type),
    "sdpa math only": (
        lambda: torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH),
        lambda: (
            torch.backends.cuda.flash_sdp_enabled(),
            torch.backends.cuda.mem_efficient_sdp_enabled(),
        ),
    ),
    "cudnn flags": (
        lambda: torch.backends.cudnn.flags(enabled=False, deterministic=True),
        lambda: (torch.backends.cudnn.enabled, torch.backends.cudnn.deterministic),
    ),
}


def _state_everywhere() -> tuple[Any, ...]:
    return tuple(read() for _, read in AMBIENT.values())


@pytest.mark.parametrize("name", AMBIENT)
def test_a_break_replays_under_the_state_its_region_set_around_it(
    bcg_device: str, name: str
) -> None:
    context, read = AMBIENT[name]
    seen: list[Any] = []

    @eager_break_during_capture
    def probe(x: torch.Tensor) -> None:
        seen.append(read())
        x.add_(1)

    x = torch.zeros(4, device=bcg_device)

    def region() -> None:
        y = x * 2
        with context():
            probe(y)
        probe(x)  # outside the block: the caller's own state

    region()
    eager = list(seen)
    before = _state_everywhere()
    with BreakableCUDAGraphCapture() as capture:
        region()
    seen.clear()
    capture.replay()
    assert seen == eager, f"{name}: eager {eager}, replay {seen}"
    assert _state_everywhere() == before  # nothing leaks past the replay


def test_a_break_replays_under_the_replaying_threads_state_plus_its_regions_blocks(
    bcg_device: str,
) -> None:
    seen: list[tuple[bool, bool]] = []

    @eager_break_during_capture
    def probe() -> None:
        seen.append((torch.is_grad_enabled(), torch.is_autocast_enabled("cuda")))

    def region() -> None:
        probe()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            probe()

    with BreakableCUDAGraphCapture() as capture:
        region()
    seen.clear()
    with torch.no_grad():  # as an eager run of the region under no_grad would see it
        capture.replay()
    assert seen == [(False, False), (False, True)]
    assert torch.is_grad_enabled() and not torch.is_autocast_enabled("cuda")


def test_a_break_that_raises_at_replay_leaves_the_callers_state(bcg_device: str) -> None:
    fail = [False]

    @eager_break_during_capture
    def probe() -> None:
        if fail[0]:
            raise ValueError("boom")

    with BreakableCUDAGraphCapture() as capture, torch.inference_mode():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            probe()
    fail[0] = True
    with pytest.raises(ValueError):
        capture.replay()
    assert not torch.is_autocast_enabled("cuda") and not torch.is_inference_mode_enabled()
    assert torch.is_grad_enabled()


@dataclasses.dataclass
class Meta:
    max_len: int
    rotary: torch.Tensor


def test_a_runners_metadata_holding_a_capture_made_tensor_stays_the_runners_object(
    bcg_device: str,
) -> None:
    x = torch.arange(4.0, device=bcg_device)
    out = torch.zeros(4, device=bcg_device)
    seen: list[tuple[int, bool]] = []
    runner: dict[str, Meta] = {}

    @eager_break_during_capture
    def attention(meta: Meta, out: torch.Tensor) -> None:
        seen.append((meta.max_len, meta is runner["meta"]))
        out.copy_(meta.rotary * meta.max_len)

    def region() -> None:
        meta = runner["meta"] = Meta(3, torch.cos(x))  # the tensor is made inside the capture
        attention(meta, out)

    with BreakableCUDAGraphCapture() as capture:
        region()
    runner["meta"].max_len = 7  # the runner updates it in place before a replay
    x.copy_(torch.arange(4.0, 8.0, device=bcg_device))
    seen.clear()
    capture.replay()
    assert seen == [(7, True)]
    assert torch.allclose(out, torch.cos(x) * 7)


def test_a_container_the_caller_drops_keeps_nothing_alive_and_replays_as_captured(
    bcg_device: str,
) -> None:
    x = torch.arange(4.0, device=bcg_device)
    out = torch.zeros(4, device=bcg_device)
    watch: list[weakref.ref[torch.Tensor]] = []

    @eager_break_during_capture
    def attention(meta: Meta, out: torch.Tensor) -> None:
        out.copy_(meta.rotary * meta.max_len)

    def region() -> None:
        rotary = torch.cos(x)
        watch.append(weakref.ref(rotary))
        attention(Meta(3, rotary), out)  # a temporary: nobody can update it

    with BreakableCUDAGraphCapture() as capture:
        region()
    gc.collect()
    assert watch[0]() is None  # the capture-made tensor died with the caller's container
    x.copy_(torch.arange(4.0, 8.0, device=bcg_device))
    capture.replay()
    assert torch.allclose(out, torch.cos(x) * 3)


def test_a_tensors_python_attributes_reach_the_break_at_replay(bcg_device: str) -> None:
    x = torch.arange(4.0, device=bcg_device)
    seen: list[tuple[Any, ...]] = []

    @eager_break_during_capture
    def masked(logits: torch.Tensor, again: torch.Tensor) -> None:
        seen.append((getattr(logits, "mask_tag", None), getattr(again, "mask_tag", None)))
        logits.add_(logits.scale.sum())  # an attribute holding a capture-made tensor

    def region() -> None:
        logits = x * 3
        logits.mask_tag = "m"
        logits.scale = x * 0 + 1
        masked(logits, logits.view(4))  # the same place, without the attribute

    region()
    eager = list(seen)
    with BreakableCUDAGraphCapture() as capture:
        region()
    seen.clear()
    capture.replay()
    assert seen == eager == [("m", None)]
