"""Reproducer for a break-arg-types finding (target-bug) in target verification.targets.sglang (sim).

[target-bug] break-arg-types (replay 0): break step 0 (shrink_pair_): namedtuple Group given to a break reached it at replay as tuple, not as namedtuple Group
Fuzzer command: python -m verification fuzz --target verification.targets.sglang --device sim --seed 0 --examples 5000 --max-ops 12 --max-breaks 4 --replays 3
Exits non-zero while the bug is present.
"""

import functools

import torch

import verification.targets.sglang as target
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
    global step_0
    # step 0: break op shrink_pair_
    eager_break_during_capture = logged_break(0)
    import dataclasses
    import math

    import torch

    def finite_peak(x):
        peak = float(x.abs().amax().item()) if x.numel() else 0.0
        return peak if math.isfinite(peak) else 0.0

    import collections

    # A dtype rides along: a break's arguments hold objects that are neither tensors nor
    # containers, and a capture must keep them as they are.
    Group = collections.namedtuple("Group", ["tensors", "floor", "dtype"])


    @eager_break_during_capture
    def shrink_group_(group):
        peak = max(finite_peak(t.to(group.dtype)) for t in group.tensors)
        for t in group.tensors:
            t.div_(max(group.floor, peak))


    def shrink_pair_(x, y):
        shrink_group_(Group([x, y], 1.0, torch.float64))
        return x


    step_0 = shrink_pair_


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
