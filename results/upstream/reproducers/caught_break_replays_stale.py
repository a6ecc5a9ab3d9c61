"""vLLM: a break that raises at capture, caught inside the ``with`` block, leaves a capture that
closes without error and replays silently stale outputs.

``add_eager`` ends the open segment, runs the op, and begins the next segment only if the op
returns. A model that catches the op's exception and falls back to another kernel (a common
pattern: "this input is not supported by the fast kernel") goes on with no segment open: the
fallback and everything after it run once, eagerly, at capture, and are never recorded.
``__exit__`` finds no segment open and closes quietly; every replay leaves those outputs as
they were at capture.

Run: ``python caught_break_replays_stale.py vllm`` (fails; ``breakable_cudagraph``, this
library: passes, by refusing to close such a capture). Needs a GPU, or the harness's simulator.
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
    def fast_half(t, out):
        raise ValueError("this input is not supported by the fast kernel")

    x = torch.randn(256, device="cuda")
    out = torch.zeros_like(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    try:
        with torch.cuda.stream(side):
            capture = capture_with(torch.cuda.graph_pool_handle())
            with capture:
                y = x * 2
                try:
                    fast_half(y, out)
                except ValueError:
                    out.copy_(y * 0.5)  # the fallback kernel
                z = out + 1
    except Exception as error:  # refusing to close such a capture is correct
        print(f"{name}: passed (the capture refused to close: {error})")
        return
    finally:
        torch.cuda.current_stream().wait_stream(side)
    x.copy_(torch.randn(256, device="cuda"))
    replay(capture)
    torch.cuda.synchronize()
    assert torch.equal(z, x * 2 * 0.5 + 1), "replay left the fallback and what followed stale"
    print(f"{name}: passed")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else 'vllm')
