"""A masked-select compaction break op and its spec: kept values are packed into a static buffer.

``torch.masked_select`` has a data-dependent output shape, which no CUDA graph can
capture, so the op is an eager break. It writes the kept values to the front of ``out``
(zeros after them) and their number to ``count``; ``SPEC`` declares exactly that:
``python -m verification fuzz-op examples.masked_compaction:SPEC``. Running this file
captures it between two graph segments and checks a replay.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

import breakable_cudagraph as bcg
from verification import BreakOpSpec, TensorArg


@bcg.eager_break_during_capture
def compact_above(
    x: torch.Tensor, out: torch.Tensor, count: torch.Tensor, *, threshold: float = 0.0
) -> None:
    """Packs the elements of ``x`` above ``threshold`` into ``out``; ``count[0]`` = how many."""
    kept = torch.masked_select(x, x > threshold)  # NaN (capture-time garbage) is never kept
    n = min(kept.numel(), out.numel())
    out.zero_()
    out[:n].copy_(kept[:n])
    count.fill_(n)


SPEC = BreakOpSpec(
    fn=compact_above,
    args={
        "x": TensorArg(("n",), (torch.float32, torch.bfloat16)),
        "out": TensorArg(("n",), "x"),
        "count": TensorArg((1,), torch.int64),
    },
    dims={"n": (1, 32)},
    writes=("out", "count"),
    params={"threshold": st.sampled_from([-0.5, 0.0, 0.5])},
)


def main() -> None:
    from verification.devices import device_context, resolve_kind

    with device_context(resolve_kind("auto")) as device:
        x = torch.randn(16, generator=torch.Generator().manual_seed(0)).to(device)
        out = torch.empty_like(x)
        count = torch.zeros(1, dtype=torch.int64, device=device)

        def forward() -> torch.Tensor:
            h = torch.sin(x)  # graph segment 1
            compact_above(h, out, count)  # eager break
            return out * count  # graph segment 2

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            forward()
            with bcg.BreakableCUDAGraphCapture() as capture:
                result = forward()
        torch.cuda.current_stream().wait_stream(side)
        x.copy_(torch.randn(16, generator=torch.Generator().manual_seed(1)).to(device))
        capture.replay()
        torch.cuda.synchronize()
        expected = forward()
        assert torch.equal(result, expected), "replay differs from eager"
        print(f"masked compaction: replay matches eager (on {torch.cuda.get_device_name()})")


if __name__ == "__main__":
    main()
