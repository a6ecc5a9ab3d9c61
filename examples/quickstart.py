"""The README's usage example, runnable: one eager break between two graph segments.

Runs on the GPU when there is one, else on the CUDA simulator (CPU tensors). Exits 0 when
every replay matches an eager run of the same function on the same inputs.
"""

from __future__ import annotations

import torch

import breakable_cudagraph as bcg
from verification.devices import device_context, resolve_kind


@bcg.eager_break_during_capture
def scale_by_max(x: torch.Tensor, out: torch.Tensor) -> None:
    # .item() cannot be captured: this runs eagerly at capture and at every replay.
    out.copy_(x / max(x.abs().max().item(), 1e-6))


def main() -> int:
    with device_context(resolve_kind("auto")) as device:
        x = torch.randn(64, 64, device=device)  # static input: copy new values into it
        y = torch.empty_like(x)  # static buffer the break writes

        def forward() -> torch.Tensor:
            h = torch.relu(x @ x)  # graph segment 1
            scale_by_max(h, y)  # eager break
            return y.softmax(-1)  # graph segment 2

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            forward()  # warm up eagerly, on the stream the capture will use
        with bcg.BreakableCUDAGraphCapture(stream=side) as capture:
            out = forward()  # records; kernels do not run here
        for replay in range(3):
            new_x = torch.randn(64, 64, device=device)
            x.copy_(new_x)
            capture.replay()
            got = out.clone()
            x.copy_(new_x)
            expected = forward()  # eager, same inputs
            if not torch.equal(got, expected):
                print(f"quickstart: replay {replay} differs from eager")
                return 1
        print(
            f"quickstart: {capture.num_graphs} graphs, {capture.num_eager_breaks} eager break, "
            f"3 replays match eager (on {torch.cuda.get_device_name()})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
