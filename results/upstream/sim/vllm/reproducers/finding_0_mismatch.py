"""Reproducer for a mismatch finding (target-bug) in target verification.targets.vllm (sim).

[target-bug] mismatch (replay 0): output 1 (value 10): 1 of 1 elements differ; first at (): got 0.136962890625, expected 0.5
Fuzzer command: python -m verification fuzz --target verification.targets.vllm --device sim --seed 0 --examples 300 --max-ops 12 --max-breaks 4 --replays 3
Exits non-zero while the bug is present.
"""

import functools

import torch

import verification.targets.vllm as target
from verification.sim import simulated_cuda

DEVICE = "cpu"
SEED = 65536
REPLAYS = 3
RTOL = 0.0
ATOL = 0.0
BREAK_STEPS = [1, 3, 4, 8]

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
    global step_1, step_3, step_4, step_8
    # step 1: break op clear_negatives_
    eager_break_during_capture = logged_break(1)
    import dataclasses
    import math

    import torch

    @eager_break_during_capture
    def clear_negatives_(x):
        x[x < 0] = 0
        return x


    step_1 = clear_negatives_

    # step 3: break op rank_via_host.out_pair
    eager_break_during_capture = logged_break(3)
    import dataclasses
    import math

    import torch

    _decorator = eager_break_during_capture
    eager_break_during_capture = lambda fn: fn  # inner calls run inline
    @eager_break_during_capture
    def rank_via_host(x):
        values = x.reshape(-1).tolist()
        order = sorted(range(len(values)), key=lambda i: (values[i] != values[i], values[i]))
        ranks = [0] * len(values)
        for rank, i in enumerate(order):
            ranks[i] = rank
        out = torch.empty(x.shape, dtype=torch.int64, device=x.device)
        out.copy_(torch.tensor(ranks, dtype=torch.int64).view(x.shape))
        return out


    eager_break_during_capture = _decorator


    rank_via_host_out_pair_compute = rank_via_host


    @eager_break_during_capture
    def rank_via_host_out_pair_write(a0, out, out2):
        args = (a0,)
        result = rank_via_host_out_pair_compute(*args, **{})
        out.copy_(result)
        out2.copy_(result.flip(list(range(result.dim()))))


    def rank_via_host_out_pair(a0, out, out2):
        rank_via_host_out_pair_write(a0, out, out2)
        return torch.stack([out, out2])


    step_3 = rank_via_host_out_pair

    # step 4: break op where_positive.out_view
    eager_break_during_capture = logged_break(4)
    import dataclasses
    import math

    import torch

    def where_positive_out_view_compute(a0, a1):
        return torch.where(a0 > 0, a0, a1)


    @eager_break_during_capture
    def where_positive_out_view_write(a0, a1, out):
        args = (a0, a1,)
        result = where_positive_out_view_compute(*args, **{})
        out.copy_(result)


    def where_positive_out_view(a0, a1, big):
        out = big[1]
        where_positive_out_view_write(a0, a1, out)
        return out


    step_4 = where_positive_out_view

    # step 8: break op gather.out_plain
    eager_break_during_capture = logged_break(8)
    import dataclasses
    import math

    import torch

    def gather_out_plain_compute(a0, a1, *, dim):
        return torch.gather(a0, dim, torch.remainder((a1 * 1000).to(torch.int64), a0.shape[dim]))


    @eager_break_during_capture
    def gather_out_plain_write(a0, a1, out, *, dim):
        args = (a0, a1,)
        result = gather_out_plain_compute(*args, **{"dim": dim})
        out.copy_(result)


    def gather_out_plain(a0, a1, out, *, dim):
        gather_out_plain_write(a0, a1, out, dim=dim)
        return out


    step_8 = gather_out_plain


define_breaks()


def make_inputs(seed):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn((7,), generator=g).to(torch.float16).to(DEVICE),
        torch.randint(-8, 8, (7,), generator=g).to(torch.int64).to(DEVICE),
        torch.randn((2, 2, 7), generator=g).to(torch.float16).to(DEVICE),
        torch.randint(-8, 8, (2, 7), generator=g).to(torch.int64).to(DEVICE),
    ]


def program(v0, v1, v2, v3):
    v4 = torch.matmul(v0, v0)
    v5 = step_1(v4)
    v6 = torch.empty((7,), dtype=torch.int64, device=v0.device)
    v7 = step_3(v0, v6, v1)
    del v1, v6
    v8 = step_4(v7, v5, v2)
    del v2
    v9 = v8.zero_()
    del v8
    v10 = v5.fill_(2.0)
    v11 = v7.fill_(-3)
    v12 = step_8(v7, v9, v3, dim=-1)
    del v3
    v13 = torch.add(v7, v5, out=v9)
    del v5, v7
    v14 = v4.clamp_(min=0.0, max=0.5)
    del v4
    v15 = torch.log(torch.abs(v14) + 1)
    del v14
    v16 = torch.outer(v0, v0)
    del v0
    return [v9, v10, v15]


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
