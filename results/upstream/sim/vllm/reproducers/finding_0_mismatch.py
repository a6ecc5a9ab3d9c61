"""Reproducer for a mismatch finding (target-bug) in target verification.targets.vllm (sim).

[target-bug] mismatch (replay 0): output 2 (value 12): 1 of 1 elements differ; first at (): got -0.6613521575927734, expected 0.3980806767940521
Fuzzer command: python -m verification fuzz --target verification.targets.vllm --device sim --seed 0 --examples 300 --max-ops 12 --max-breaks 4 --replays 3
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
BREAK_STEPS = [2, 7, 9]

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


# step 2: break op scale_by_item.out_plain
eager_break_during_capture = logged_break(2)
import dataclasses
import math

import torch

_decorator = eager_break_during_capture
eager_break_during_capture = lambda fn: fn  # inner calls run inline
def finite_peak(x):
    peak = float(x.abs().amax().item()) if x.numel() else 0.0
    return peak if math.isfinite(peak) else 0.0

@eager_break_during_capture
def scale_by_item(x):
    return x * (1.0 / (1.0 + finite_peak(x)))


eager_break_during_capture = _decorator


scale_by_item_out_plain_compute = scale_by_item


@eager_break_during_capture
def scale_by_item_out_plain_write(a0, out):
    args = (a0,)
    result = scale_by_item_out_plain_compute(*args, **{})
    out.copy_(result)


def scale_by_item_out_plain(a0, out):
    scale_by_item_out_plain_write(a0, out)
    return out


step_2 = scale_by_item_out_plain


# step 7: break op neg.out_plain
eager_break_during_capture = logged_break(7)
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


step_7 = neg_out_plain


# step 9: break op normalize_
eager_break_during_capture = logged_break(9)
import dataclasses
import math

import torch

def finite_peak(x):
    peak = float(x.abs().amax().item()) if x.numel() else 0.0
    return peak if math.isfinite(peak) else 0.0

@eager_break_during_capture
def normalize_(x):
    return x.div_(max(1.0, finite_peak(x)))


step_9 = normalize_


def make_inputs(seed):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn((), generator=g).to(torch.float32).to(DEVICE),
        torch.randint(-8, 8, (1,), generator=g).to(torch.int64).to(DEVICE),
        torch.randn((), generator=g).to(torch.float32).to(DEVICE),
    ]


def program(v0, v1, v2):
    v3 = torch.neg(v0)
    v4 = torch.empty((), dtype=torch.float32, device=v0.device)
    v5 = step_2(v0, v4)
    del v4
    v6 = torch.neg(v0)
    v7 = torch.neg(v0)
    v8 = torch.neg(v0)
    v9 = torch.neg(v0)
    v10 = step_7(v0, v2)
    del v2
    v11 = torch.neg(v0)
    v12 = step_9(v5)
    del v5
    v13 = torch.neg(v0)
    del v0
    return [v3, v6, v12]


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
