"""Reproducer for a exception finding (target-bug) in target verification.targets.piecewise_cuda_graphs (sim).

[target-bug] exception: capture raised AssertionError() [at piecewise_cuda_graphs.py:344, in _end_segment]
Fuzzer command: python -m verification fuzz --target verification.targets.piecewise_cuda_graphs --device sim --seed 0 --examples 300 --max-ops 12 --max-breaks 4 --replays 3
Exits non-zero while the bug is present.
"""

import functools

import torch

import verification.targets.piecewise_cuda_graphs as target
from verification.sim import simulated_cuda

DEVICE = "cpu"
SEED = 0
REPLAYS = 3
RTOL = 0.0
ATOL = 0.0
BREAK_STEPS = [0]

CALLS = []
_depth = [0]


def logged_break(step):
    """Logs one call per break step (nested calls excluded), then applies the target's decorator."""

    def decorate(fn):
        @functools.wraps(fn)
        def logged(*args, **kwargs):
            if _depth[0] == 0:
                leaves = torch.utils._pytree.tree_flatten((args, kwargs))[0]
                tensors = [a for a in leaves if isinstance(a, torch.Tensor)]
                CALLS.append((step, tuple(t.data_ptr() for t in tensors)))
            _depth[0] += 1
            try:
                return fn(*args, **kwargs)
            finally:
                _depth[0] -= 1

        return target.eager_break_during_capture(logged)

    return decorate


def define_breaks():
    """Defines each break step anew."""
    global step_0
    # step 0: break op neg.out_nested_write
    eager_break_during_capture = logged_break(0)
    import dataclasses
    import math

    import torch

    def neg_out_nested_write_compute(a0):
        return torch.neg(a0)


    @eager_break_during_capture
    def neg_out_nested_write_fill(out, args, params):
        out.copy_(neg_out_nested_write_compute(*args, **params))


    @eager_break_during_capture
    def neg_out_nested_write_write(a0, out):
        args = (a0,)
        neg_out_nested_write_fill(out, args, {})


    def neg_out_nested_write(a0, out):
        neg_out_nested_write_write(a0, out)
        return out


    step_0 = neg_out_nested_write


define_breaks()


def make_inputs(seed):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn((), generator=g).to(torch.float32).to(DEVICE),
        torch.randn((), generator=g).to(torch.float32).to(DEVICE),
    ]


def program(v0, v1):
    v2 = step_0(v0, v1)
    del v0, v1
    return [v2]


def seed_rng(seed):
    torch.manual_seed(seed)
    if DEVICE == "cuda":
        torch.cuda.manual_seed(seed)


def same(actual, expected):
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        return False
    a, e = actual.cpu(), expected.cpu()
    if a.is_complex():
        a, e = torch.view_as_real(a), torch.view_as_real(e)
    if not a.dtype.is_floating_point:
        return bool((a == e).all())
    if RTOL == 0 and ATOL == 0:
        return bool(((a == e) | (a.isnan() & e.isnan())).all())
    return bool(torch.isclose(a, e, rtol=RTOL, atol=ATOL, equal_nan=True).all())


def main():
    static = [x.clone() for x in make_inputs(SEED)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        seed_rng(SEED)
        program(*static)  # eager warm-up
        capture = target.BreakableCUDAGraphCapture()
        seed_rng(SEED)
        CALLS.clear()
        with capture:
            outputs = program(*static)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    captured = list(CALLS)
    assert [s for s, _ in captured] == BREAK_STEPS, f"capture called breaks {captured}"
    for replay in range(REPLAYS):
        seed = SEED + 1 + replay
        fresh = make_inputs(seed)
        define_breaks()  # the reference shares no state with the captured run's breaks
        seed_rng(seed)
        expected = program(*[x.clone() for x in fresh])
        CALLS.clear()
        for buffer, value in zip(static, fresh):
            buffer.copy_(value)
        seed_rng(seed)
        capture.replay()
        torch.cuda.synchronize()
        assert CALLS == captured, f"replay {replay}: break calls {CALLS}, captured {captured}"
        for index, (actual, want) in enumerate(zip(outputs, expected)):
            assert same(actual, want), f"replay {replay}: output {index} differs from eager"
    print("reproducer passed: replay matched eager every time")


if __name__ == "__main__":
    with simulated_cuda():
        main()
