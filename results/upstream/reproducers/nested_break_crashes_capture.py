"""SGLang: a decorated op that calls another decorated op crashes the capture.

``eager_on_graph``'s wrapper ends the current segment and runs the op while the capture is
still the context's current one. A decorated op inside it (an attention kernel calling a
decorated helper, a decorated wrapper around a decorated op) sees that capture and ends the
segment again: none is open, so ``_end_current_segment`` fails (``assert graph is not None``)
and the capture is lost. Outside a capture the same code runs fine.

Run: ``python nested_break_crashes_capture.py sglang`` (fails; ``breakable_cudagraph``, this
library: passes, running the inner call inline). Needs a GPU, or the harness's simulator.
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
    if name == "piecewise_cuda_graphs":
        import piecewise_cuda_graphs as pcg

        class PiecewiseCapture:
            """A CUDAGraphSequence captured by piecewise_graph, as its README shows."""

            def __init__(self, pool):
                self.sequence = pcg.CUDAGraphSequence(pool=pool)

            def __enter__(self):
                self.context = pcg.piecewise_graph(self.sequence)
                self.context.__enter__()
                return self

            def __exit__(self, *exc):
                return self.context.__exit__(*exc)

        return PiecewiseCapture, (lambda c: c.sequence.replay()), pcg.no_graph
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
    def add_one_(t):
        t.add_(1)

    @decorate
    def add_one_then_double_(t):
        add_one_(t)  # a decorated op calling a decorated op
        t.mul_(2)

    x = torch.ones(256, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        add_one_then_double_(x * 1)  # warm-up: fine outside a capture
        capture = capture_with(torch.cuda.graph_pool_handle())
        with capture:
            y = x * 3
            add_one_then_double_(y)
            z = y + 1
    torch.cuda.current_stream().wait_stream(side)
    x.fill_(2.0)
    replay(capture)
    torch.cuda.synchronize()
    assert torch.equal(z, (x * 3 + 1) * 2 + 1)
    print(f"{name}: passed")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else 'sglang')
