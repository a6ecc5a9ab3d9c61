"""vLLM: a break that returns its argument hands the caller a tensor that owns no memory.

``eager_break_during_capture`` runs the op at capture on weak references of its arguments and
returns what the op returned. An op that works in place and returns its argument (``x.mul_``)
so gives back a non-owning alias. Once the caller drops its own reference, the block goes back
to the capture's pool while the returned tensor still points at it; the next intermediate
reuses it and the replayed graph overwrites the result.

Run: ``python returned_argument_not_owned.py vllm`` (fails) or ``... breakable_cudagraph``
(this library, passes). Needs a GPU, or the harness's simulator (tests/test_upstream_reproducers.py).
"""

import sys

import torch


def engine(name):
    """(capture(pool) -> context manager, replay(capture), decorator) of one engine."""
    if name == "vllm":
        from vllm.compilation.breakable_cudagraph import (
            BreakableCUDAGraphCapture,
            eager_break_during_capture,
        )
    else:
        from breakable_cudagraph import BreakableCUDAGraphCapture, eager_break_during_capture
    return (lambda pool: BreakableCUDAGraphCapture(pool=pool)), (lambda c: c.replay()), (
        eager_break_during_capture
    )


def main(name):
    capture_with, replay, decorate = engine(name)

    @decorate
    def double_(t):
        return t.mul_(2)  # in place, returns its argument, as out-buffer ops may

    x = torch.ones(1024, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        double_(x + 1)  # warm-up
        capture = capture_with(torch.cuda.graph_pool_handle())
        with capture:
            t = x + 1  # an intermediate, in the capture's pool
            out = double_(t)
            del t  # the caller keeps `out`, what the op returned
            other = x * 10  # a new intermediate: takes t's block if nothing owns it
    torch.cuda.current_stream().wait_stream(side)
    x.fill_(3.0)
    replay(capture)
    torch.cuda.synchronize()
    assert torch.equal(other, x * 10)
    assert torch.equal(out, (x + 1) * 2), f"returned tensor holds {out[0].item()}, not 8.0"
    print(f"{name}: passed")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "vllm")
