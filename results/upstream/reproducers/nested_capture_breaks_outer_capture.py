"""SGLang: a capture opened inside a capture is not refused; torch's refusal breaks the outer one.

``BreakableCUDAGraphCapture.__enter__`` has no check for an open capture. The nested one
publishes itself as the context's current capture (``_current_capture_var``, the stream and
forked-stream variables, the ``wait_stream`` hook), then makes a ``torch.cuda.CUDAGraph`` whose
``capture_begin`` torch refuses on the capturing stream ("Cannot register the state during
capturing stage"). Nothing is undone, so the outer capture's next decorated call ends the nested
capture's segment, which never began: ``assert graph is not None`` fails and the outer capture
is lost. On a GPU it is worse: that refused ``CUDAGraph`` aborts the process when it is freed
("terminate called ... The graph should be registered to the state", H200, torch 2.11), here as
soon as the caller's ``except`` block drops the error.

The scenario runs in a child process (forked before any CUDA call), so an abort is reported as
this script's failure, with the child's last words, instead of killing it.

Run: ``python nested_capture_breaks_outer_capture.py sglang`` (fails; ``breakable_cudagraph``,
this library: passes, refusing the nested capture before any graph begins). Needs a GPU, or the
harness's simulator.
"""

import os
import signal
import sys
import traceback

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


def scenario(name):
    capture_with, replay, decorate = engine(name)

    @decorate
    def halve_(t):
        t.mul_(0.5)

    x = torch.ones(1024, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    refusal = None
    with torch.cuda.stream(side):
        halve_(x * 2)  # warm-up: fine outside a capture
        capture = capture_with(torch.cuda.graph_pool_handle())
        with capture:
            y = x * 2
            try:
                with capture_with(torch.cuda.graph_pool_handle()):  # a capture inside a capture
                    y.add_(100)
            except RuntimeError as error:  # the caller's mistake, reported: fine
                refusal = str(error)  # only the words: the error itself is dropped here
            print(f"{name}: nested capture refused: {refusal}")
            halve_(y)  # the outer capture goes on
            z = y + 1
    torch.cuda.current_stream().wait_stream(side)
    assert refusal is not None, "the nested capture was let through"
    assert "captur" in refusal.lower() or "nest" in refusal.lower(), "unclear refusal"
    x.fill_(3.0)
    replay(capture)
    torch.cuda.synchronize()
    assert torch.equal(z, x + 1), f"replay gave {z[0].item()}, not {x[0].item() + 1}"
    after = x * 2
    halve_(after)  # outside any capture: a plain call
    assert torch.equal(after, x), "a decorated call after the capture did not run plainly"


def main(name):
    """Runs the scenario in a forked child; its exception or its death is this call's failure."""
    if not hasattr(os, "fork") or torch.cuda.is_initialized():
        scenario(name)  # a child forked after CUDA's initialization could not use it
        print(f"{name}: passed")
        return
    sys.stdout.flush()
    sys.stderr.flush()
    result_read, result_write = os.pipe()
    stderr_read, stderr_write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: report one line, never return into the caller's code
        os.close(result_read)
        os.close(stderr_read)
        os.dup2(stderr_write, 2)
        torch.set_num_threads(1)  # a parent's OpenMP pool does not survive the fork
        outcome, code = "passed", 0
        try:
            scenario(name)
        except BaseException as error:  # every failure is the outcome
            traceback.print_exc()
            where = traceback.extract_tb(error.__traceback__)[-1]
            place = f"{os.path.basename(where.filename)}:{where.lineno} in {where.name}"
            outcome, code = f"{error!r} at {place}", 1
        sys.stdout.flush()
        sys.stderr.flush()
        os.write(result_write, outcome.encode())
        os._exit(code)
    os.close(result_write)
    os.close(stderr_write)
    with os.fdopen(stderr_read, errors="replace") as pipe:
        said = pipe.read()
    with os.fdopen(result_read) as pipe:
        outcome = pipe.read()
    _, status = os.waitpid(child, 0)
    sys.stderr.write(said)
    if os.WIFSIGNALED(status):
        last = [line.strip() for line in said.splitlines() if "what()" in line][:1]
        died = signal.Signals(os.WTERMSIG(status)).name
        raise AssertionError(
            f"{name}: the scenario's process died by {died}"
            + (f": {last[0]}" if last else "")
        )
    if outcome != "passed":
        raise AssertionError(f"{name}: {outcome}")
    print(f"{name}: passed")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "sglang")
