"""vLLM and SGLang: a conjugate view given to a break reaches it without its conjugate bit.

Both hold a break's tensor arguments through ``weak_ref_tensor``, which rebuilds a tensor from
``data_ptr()``, sizes and strides (``torch::from_blob``). The rebuilt tensor is plain: a
conjugate or negative view loses its bit (the break reads the unconjugated, un-negated values)
and a tensor subclass loses its type and attributes. vLLM rebuilds at capture already, SGLang
from the first replay on; either way the break computes with the wrong values.

Run: ``python conjugate_view_loses_its_bit.py vllm`` (or ``sglang``: fails;
``breakable_cudagraph``, this library: passes). Needs a GPU, or the harness's simulator.
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
    def copy_into(src, out):
        out.copy_(src)

    x = torch.full((256,), 1 + 2j, dtype=torch.complex64, device="cuda")
    out = torch.zeros_like(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        copy_into((x * 1).conj(), out)  # warm-up
        capture = capture_with(torch.cuda.graph_pool_handle())
        with capture:
            view = (x * 1).conj()  # an intermediate, seen through a conjugate view
            copy_into(view, out)
    torch.cuda.current_stream().wait_stream(side)
    x.fill_(3 + 4j)
    replay(capture)
    torch.cuda.synchronize()
    assert torch.equal(out, x.conj()), f"the break read {out[0].item()}, not {x.conj()[0].item()}"
    print(f"{name}: passed")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else 'vllm')
