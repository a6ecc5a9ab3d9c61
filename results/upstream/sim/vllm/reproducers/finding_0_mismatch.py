"""Reproducer for a mismatch finding (target-bug) in target verification.targets.vllm (sim).

[target-bug] mismatch (replay 1): output 2 (value 14): 1 of 120 elements differ; first at (0, 0, 0): got 1.401298464324817e-45, expected 0.0
Fuzzer command: python -m verification fuzz --target verification.targets.vllm --device sim --seed 0 --examples 300 --max-ops 12 --max-breaks 4 --replays 3
Exits non-zero while the bug is present.
"""

import functools

import torch

import verification.targets.vllm as target
from verification.sim import simulated_cuda

DEVICE = "cpu"
SEED = 19980
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


# step 2: break op dict_mix.out_nested
eager_break_during_capture = logged_break(2)
import dataclasses
import math

import torch

def finite_peak(x):
    peak = float(x.abs().amax().item()) if x.numel() else 0.0
    return peak if math.isfinite(peak) else 0.0

import collections


# A dict also read by attribute, as transformers' ModelOutput is: a capture that rebuilds it
# as a plain dict breaks the break at replay.
class Fields(collections.OrderedDict):
    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


@eager_break_during_capture
def mix_dict(tensors, extra):
    gate = finite_peak(extra.b)
    return {"sum": tensors["a"] + gate, "diff": tensors["a"] - extra.b}


def dict_mix(x, y):
    parts = mix_dict({"a": x}, Fields(b=y))
    return parts["sum"] * parts["diff"]


dict_mix_out_nested_compute = dict_mix


@eager_break_during_capture
def dict_mix_out_nested_write(a0, a1, out):
    args = (a0, a1,)
    result = dict_mix_out_nested_compute(*args, **{})
    out.copy_(result)


def dict_mix_out_nested(a0, a1, out):
    dict_mix_out_nested_write(a0, a1, out)
    return out


step_2 = dict_mix_out_nested


# step 7: break op host_round_trip.out_container
eager_break_during_capture = logged_break(7)
import dataclasses
import math

import torch

_decorator = eager_break_during_capture
eager_break_during_capture = lambda fn: fn  # inner calls run inline
@eager_break_during_capture
def host_round_trip(x):
    host = x.cpu()
    return (host * 2 + 1).to(x.device)


eager_break_during_capture = _decorator


host_round_trip_out_container_compute = host_round_trip


@eager_break_during_capture
def host_round_trip_out_container_write(tensors):
    args, out = tuple(tensors["inputs"]), tensors["out"]
    result = host_round_trip_out_container_compute(*args, **{})
    out.copy_(result)


def host_round_trip_out_container(a0, out):
    host_round_trip_out_container_write({"inputs": [a0], "out": out})
    return out


step_7 = host_round_trip_out_container


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
        torch.randint(0, 2, (8, 3, 5), generator=g).to(torch.bool).to(DEVICE),
        torch.randn((8, 3, 5), generator=g).to(torch.float32).to(DEVICE),
        torch.randn((8, 3, 5), generator=g).to(torch.float16).to(DEVICE),
        torch.randint(0, 2, (), generator=g).to(torch.bool).to(DEVICE),
        torch.randn((8, 3, 5), generator=g).to(torch.float16).to(DEVICE),
    ]


def program(v0, v1, v2, v3, v4):
    v5 = torch.exp(v2, out=v1)
    del v1
    v6 = torch.empty((8, 3, 5), dtype=torch.float32, device=v5.device)
    v7 = step_2(v5, v5, v6)
    del v6
    v8 = torch.var(v7, dim=-1, keepdim=True, correction=1)
    v9 = torch.cos(v5)
    v10 = v2.to(torch.int64)
    v11 = torch.unbind(v5, 0)[5]
    del v5
    v12 = step_7(v2, v4)
    del v2, v4
    v13 = torch.tril(v8)
    del v8
    v14 = step_9(v7)
    del v7
    v15 = torch.sum(v3, dim=0, keepdim=True)
    del v3
    return [v11, v13, v14, v15]


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
