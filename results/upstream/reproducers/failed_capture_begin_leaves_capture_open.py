"""vLLM and SGLang: a capture whose first ``capture_begin`` fails stays open in the thread.

``__enter__`` records the capture as the thread's active one (vLLM's ``_tls.active``,
SGLang's ``_current_capture_var`` plus its ``wait_stream`` hook) before it begins the first
segment. When that ``capture_begin`` raises (here: the capture was opened on the default
stream, which CUDA refuses; equally a pool still recording, or out of memory), ``__exit__``
never runs and nothing is undone. vLLM then refuses every later capture in the thread
("Nested BreakableCUDAGraphCapture is not supported"); SGLang ends a segment that does not
exist at the next decorated call (AssertionError), even outside any capture.

Run: ``python failed_capture_begin_leaves_capture_open.py vllm`` (or ``sglang``: fails;
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
    def halve_(t):
        t.mul_(0.5)

    x = torch.ones(1024, device="cuda")
    try:
        with torch.cuda.stream(torch.cuda.default_stream()), capture_with(None):
            halve_(x * 2)
    except RuntimeError as error:  # the caller's mistake, reported: fine
        print(f"{name}: first capture refused as expected: {error}")
    else:
        # A library that captures on a stream of its own accepts this; nothing to show then.
        print(f"{name}: the first capture was not refused")
    y = x * 2
    halve_(y)  # outside any capture: a plain call
    assert torch.equal(y, x), "a decorated call outside any capture did not run plainly"
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        capture = capture_with(torch.cuda.graph_pool_handle())
        with capture:  # a correct capture, after the failed one
            z = x * 2
            halve_(z)
            z.add_(1)
    torch.cuda.current_stream().wait_stream(side)
    x.fill_(3.0)
    replay(capture)
    torch.cuda.synchronize()
    assert torch.equal(z, x + 1)
    print(f"{name}: passed")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "vllm")
