"""SGLang: a namedtuple given to a break reaches it at replay as a plain tuple.

``eager_on_graph`` rebuilds a break's tuple and list arguments to weak-reference their tensors
(``_weak_ref_if_tensor``), with ``tuple(...)``: a namedtuple (a model's grouped tensors, a
config record) loses its type, and the break fails at the first replay on attribute access
(``'tuple' object has no attribute ...``) or silently reads fields by position.

Run: ``python namedtuple_argument_becomes_tuple.py sglang`` (fails; ``breakable_cudagraph``,
this library: passes). Needs a GPU, or the harness's simulator.
"""

import sys

import torch


def engine(name):
    """(capture(pool) -> context manager, replay(capture), decorator) of one engine."""
    if name == "sglang":
        from sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph import (
            breakable_cuda_graph as sgl,
        )

        def capture_with(pool):
            graph = sgl.BreakableCUDAGraph()
            context = sgl.BreakableCUDAGraphCapture(graph, pool=pool)
            context.replay = graph.replay
            return context

        return capture_with, (lambda c: c.replay()), sgl.eager_on_graph
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
    import collections

    capture_with, replay, decorate = engine(name)
    Group = collections.namedtuple("Group", ["tensors", "scale"])

    @decorate
    def scale_group_(group):
        for t in group.tensors:
            t.mul_(group.scale)

    x = torch.ones(256, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        scale_group_(Group([x * 1], 2.0))  # warm-up
        capture = capture_with(torch.cuda.graph_pool_handle())
        with capture:
            y = x * 3
            scale_group_(Group([y], 2.0))
            z = y + 1
    torch.cuda.current_stream().wait_stream(side)
    x.fill_(2.0)
    replay(capture)
    torch.cuda.synchronize()
    assert torch.equal(z, x * 3 * 2 + 1)
    print(f"{name}: passed")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else 'sglang')
