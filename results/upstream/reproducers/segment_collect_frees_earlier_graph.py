"""piecewise-cuda-graphs: the cyclic collector stays on while a capture is open; an earlier
capture that only the collector can free, freed by it in the middle of a graph segment, breaks
the open capture.

A serving engine drops captures it recaptures (a new batch size, a new LoRA); one kept in a
reference cycle (a closure that holds its own capture, a module attribute pointing back) is
garbage until the collector runs, and the collector runs at any allocation of Python objects.
Freeing a captured graph while a capture is open is illegal on a GPU. Runners that freeze the
collector around their captures (SGLang's ``freeze_gc``) are safe; a bare ``piecewise_graph``
user is not, and the package does not say that this is the caller's duty.

Run: ``python segment_collect_frees_earlier_graph.py piecewise_cuda_graphs`` (fails;
``breakable_cudagraph``, this library: passes, it keeps the collector off while capturing).
Needs a GPU, or the harness's simulator. It fails on the simulator; on the H200 (torch 2.11) it
passed on the package in two runs, so the bug is unconfirmed on hardware (README.md, P4).
"""

import gc
import sys

import torch


def engine(name):
    """(capture(pool) -> context manager, replay(capture), decorator) of one engine."""
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
    from breakable_cudagraph import BreakableCUDAGraphCapture, eager_break_during_capture

    return (lambda pool: BreakableCUDAGraphCapture(pool=pool)), (lambda c: c.replay()), (
        eager_break_during_capture
    )


def main(name):
    capture_with, replay, decorate = engine(name)

    @decorate
    def halve(t):
        t.mul_(0.5)

    # No random ops: a broken capture may leave torch's CUDA generator in capture mode.
    x = torch.linspace(-1.0, 1.0, 8, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        old = capture_with(torch.cuda.graph_pool_handle())
        with old:
            halve(x * 2)
        capture = capture_with(torch.cuda.graph_pool_handle())
        thresholds = gc.get_threshold()
        with capture:  # raises here while the bug is present
            y = x * 3
            # Garbage only the cyclic collector can free, made here so that it is still in
            # the young generation the next collection looks at (made earlier, a collection
            # meanwhile may have moved it to an older one, which that collection skips).
            cycle = [old]
            cycle.append(cycle)
            del old, cycle
            gc.set_threshold(1, *thresholds[1:])  # the collector runs at the next allocation
            _ = [[] for _ in range(64)]
            gc.set_threshold(*thresholds)
            halve(y)
            y.add_(1)
    torch.cuda.current_stream().wait_stream(side)
    x.copy_(torch.linspace(2.0, 3.0, 8, device="cuda"))
    replay(capture)
    torch.cuda.synchronize()
    assert torch.equal(y, x * 3 * 0.5 + 1), "the capture replayed wrong values"
    print(f"{name}: passed")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "piecewise_cuda_graphs")
