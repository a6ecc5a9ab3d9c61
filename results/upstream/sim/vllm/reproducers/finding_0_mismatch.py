"""Reproducer for a mismatch finding (target-bug) in target verification.targets.vllm (sim).

[target-bug] mismatch (replay 0): output 1 (value 11): 1 of 1 elements differ; first at (): got 0.6613521575927734, expected -0.0
Fuzzer command: python -m verification fuzz --target verification.targets.vllm --device sim --seed 0 --examples 5000 --max-ops 12 --max-breaks 4 --replays 3
Exits non-zero while the bug is present.
"""

import functools

import torch

import verification.targets.vllm as target
from verification.sim import simulated_cuda

DEVICE = "cpu"
SEED = 0
REPLAYS = 3
RTOL = 0.0
ATOL = 0.0
BREAK_STEPS = [2, 3, 4, 5]

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
                here = step if isinstance(step, int) else step_of(step)
                CALLS.append((here, tuple(t.data_ptr() for t in tensors)))
            _depth[0] += 1
            try:
                return fn(*args, **kwargs)
            finally:
                _depth[0] -= 1

        return target.eager_break_during_capture(logged)

    return decorate


def define_breaks():
    """Defines each break step anew."""
    global step_2, step_3, step_4, step_5
    # step 2: fill_, run as an eager break
    @logged_break(2)
    def step_2(a0, *, value):
        return a0.fill_(value)

    # step 3: break op neg.out_plain
    eager_break_during_capture = logged_break(3)
    import dataclasses
    import math

    import torch

    def neg_out_plain_compute(a0):
        return torch.neg(a0)


    @eager_break_during_capture
    def neg_out_plain_write(a0, out):
        args = (a0,)
        result = neg_out_plain_compute(*args, **{})
        out.copy_(result)


    def neg_out_plain(a0, out):
        neg_out_plain_write(a0, out)
        return out


    step_3 = neg_out_plain

    # step 4: break op neg.out_plain
    eager_break_during_capture = logged_break(4)
    import dataclasses
    import math

    import torch

    def neg_out_plain_compute(a0):
        return torch.neg(a0)


    @eager_break_during_capture
    def neg_out_plain_write(a0, out):
        args = (a0,)
        result = neg_out_plain_compute(*args, **{})
        out.copy_(result)


    def neg_out_plain(a0, out):
        neg_out_plain_write(a0, out)
        return out


    step_4 = neg_out_plain

    # step 5: add_out, run as an eager break
    @logged_break(5)
    def step_5(a0, a1, a2):
        return torch.add(a0, a1, out=a2)


define_breaks()


def make_inputs(seed):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn((), generator=g).to(torch.float32).to(DEVICE),
        torch.randn((), generator=g).to(torch.float32).to(DEVICE),
        torch.randn((), generator=g).to(torch.float32).to(DEVICE),
    ]


def program(v0, v1, v2):
    v3 = torch.neg(v0)
    v4 = torch.neg(v0)
    v5 = step_2(v4, value=0.0)
    del v4
    v6 = step_3(v0, v1)
    del v1
    v7 = step_4(v0, v2)
    del v2
    v8 = step_5(v0, v0, v3)
    v9 = torch.neg(v0)
    v10 = torch.neg(v0)
    del v0
    v11 = torch.neg(v5)
    del v5
    return [v3, v11]


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
    exact = a.element_size() == 1  # float8: exact, in float32
    a, e = (a.float(), e.float()) if exact else (a, e)
    if exact or (RTOL == 0 and ATOL == 0):
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
