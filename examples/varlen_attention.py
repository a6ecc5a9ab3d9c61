"""A varlen attention break op and its spec: lengths come from ``.tolist()``, results go into ``out``.

``lengths.tolist()`` is a host read, legal only in an eager break, so the op is marked
with ``eager_break_during_capture``. ``SPEC`` declares it for the harness:
``python -m verification fuzz-op examples.varlen_attention:SPEC``. Running this file
captures one forward pass with the op between two graph segments and checks a replay.
"""

from __future__ import annotations

import math

import torch
from hypothesis import strategies as st

import breakable_cudagraph as bcg
from verification import BreakOpSpec, TensorArg


@bcg.eager_break_during_capture
def varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lengths: torch.Tensor,
    out: torch.Tensor,
    *,
    causal: bool = False,
) -> None:
    """``out[b]`` = attention of ``q[b]`` over the first ``lengths[b]`` keys of ``k[b]``, ``v[b]``."""
    seq = q.shape[1]
    # At capture the break sees garbage: clamp host values instead of trusting them.
    host = [min(max(int(n), 0), seq) for n in lengths.tolist()]
    valid = torch.tensor(host, device=q.device)[:, None, None]
    keys = torch.arange(seq, device=q.device)
    keep = keys[None, None, :] < valid  # (batch, 1, seq): key j is within the length
    if causal:
        keep = keep & (keys[None, :, None] >= keys[None, None, :])
    scores = (q.float() @ k.float().transpose(1, 2)) / math.sqrt(q.shape[-1])
    weights = torch.nan_to_num(scores.masked_fill(~keep, -math.inf).softmax(-1))
    out.copy_((weights @ v.float()).to(out.dtype))


qkv = TensorArg(("batch", "seq", "dim"), (torch.float32, torch.float16))
same = TensorArg(("batch", "seq", "dim"), "q")  # q's dtype
SPEC = BreakOpSpec(
    fn=varlen_attention,  # decorated or not: the harness applies the target's decorator
    args={
        "q": qkv,
        "k": same,
        "v": same,
        "out": same,
        "lengths": TensorArg(("batch",), torch.int64, low=1, high="seq"),  # <= seq
    },
    dims={"batch": (1, 3), "seq": (1, 8), "dim": (1, 8)},
    writes=("out",),
    params={"causal": st.booleans()},
    rtol=1e-3,
    atol=1e-3,
)


def main() -> None:
    from verification.devices import device_context, resolve_kind

    with device_context(resolve_kind("auto")) as device:
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(2, 8, 4, generator=g).to(device) for _ in range(3))
        lengths = torch.tensor([3, 8], device=device)
        out = torch.empty_like(q)

        def forward() -> torch.Tensor:
            h = q * 2  # graph segment 1
            varlen_attention(h, k, v, lengths, out)  # eager break
            return out + 1  # graph segment 2

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            forward()
            with bcg.BreakableCUDAGraphCapture() as capture:
                result = forward()
        torch.cuda.current_stream().wait_stream(side)
        lengths.copy_(torch.tensor([5, 1], device=device))
        capture.replay()
        torch.cuda.synchronize()
        expected = forward()
        assert torch.allclose(result, expected), "replay differs from eager"
        print(f"varlen attention: replay matches eager (on {torch.cuda.get_device_name()})")


if __name__ == "__main__":
    main()
