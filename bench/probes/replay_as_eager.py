"""What a break sees at replay against an eager run of its region: three model idioms.

1. A LoRA delta called inside ``torch.autocast("cuda", dtype=torch.bfloat16)``: the break
   records ``torch.is_autocast_enabled("cuda")``.
2. A runner's attention metadata (a dataclass of ``max_len`` and a tensor computed inside the
   captured region), updated in place (``meta.max_len = 7``) before the replay.
3. A Python attribute set on a tensor made inside the capture (``logits.mask_tag = "m"``).

Each prints what the break saw eagerly and at replay; the exit status is 0 when every replay
saw what eager did. ``python -m bench.probes.replay_as_eager [--device auto|cuda|sim]``
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

import torch

import breakable_cudagraph as bcg
from verification.devices import device_context, resolve_kind


@dataclasses.dataclass
class Meta:
    max_len: int
    rotary: torch.Tensor


def _captured(region: Any) -> bcg.BreakableCUDAGraphCapture:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        region()  # warm-up
        with bcg.BreakableCUDAGraphCapture(stream=side) as capture:
            region()
    torch.cuda.current_stream().wait_stream(side)
    return capture


def probes(device: Any) -> list[tuple[str, Any, Any]]:
    """(probe, what eager saw, what replay saw) for each idiom."""
    x = torch.randn(8, 8, device=device)
    out = torch.empty_like(x)
    seen: list[Any] = []
    rows = []

    @bcg.eager_break_during_capture
    def lora(h: torch.Tensor) -> None:
        seen.append(torch.is_autocast_enabled("cuda"))
        out.copy_(h @ h)

    def autocast_region() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            lora(x + 1)

    @bcg.eager_break_during_capture
    def attention(meta: Meta) -> None:
        seen.append(meta.max_len)
        out.copy_(meta.rotary * meta.max_len)

    runner: dict[str, Meta] = {}

    def metadata_region() -> None:
        runner["meta"] = Meta(3, torch.cos(x))
        attention(runner["meta"])

    @bcg.eager_break_during_capture
    def masked(logits: torch.Tensor) -> None:
        seen.append(getattr(logits, "mask_tag", None))
        out.copy_(logits)

    def attribute_region() -> None:
        logits = x * 3
        logits.mask_tag = "m"
        masked(logits)

    for name, region, before_replay in (
        ("break inside autocast", autocast_region, lambda: None),
        ("runner metadata updated in place", metadata_region, lambda: None),
        ("attribute on a capture-made tensor", attribute_region, lambda: None),
    ):
        capture = _captured(region)
        if name.startswith("runner"):
            runner["meta"].max_len = 7
            seen.clear()
            attention(runner["meta"])  # eager, on the updated metadata
        else:
            seen.clear()
            region()
        torch.cuda.synchronize()
        eager = list(seen)
        seen.clear()
        before_replay()
        capture.replay()
        torch.cuda.synchronize()
        rows.append((name, eager, list(seen)))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto, cuda or sim (default auto)")
    kind = resolve_kind(parser.parse_args().device)
    failed = 0
    with device_context(kind) as device:
        print(f"device {kind}, torch {torch.__version__}")
        for name, eager, replay in probes(device):
            same = eager == replay
            failed += not same
            print(f"{'ok  ' if same else 'DIFF'} {name}: eager {eager}, replay {replay}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
