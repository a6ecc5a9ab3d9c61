"""Reproducer for a break-arg-types finding (target-bug) in target verification.targets.sglang (sim).

[target-bug] break-arg-types (replay 0): break step 0 (neg): Tensor with attributes [bcg_tag] given to a break reached it at replay as Tensor, not as Tensor with attributes [bcg_tag]
Fuzzer command: python -m verification fuzz --target verification.targets.sglang --device sim --seed 0 --examples 5000 --max-ops 12 --max-breaks 4 --replays 3
Exits non-zero while the bug is present.
"""

import faulthandler
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
CAPTURES = 1
ORDER = []

CALLS = []
_depth = [0]


def seen_now():
    """What a break can read of the state it runs under (redefined below where it matters)."""
    return ()


def logged_break(step):
    """Logs one call per break step (nested calls excluded): its buffers, its tensors' Python
    attributes and the state it runs under; then applies the target's decorator, to the
    function defined as ``way`` says (a method, a partial ...: ``bound_as``)."""

    def decorate(fn, way=""):
        @functools.wraps(fn)
        def logged(*args, **kwargs):
            if _depth[0] == 0:
                leaves = torch.utils._pytree.tree_flatten((args, kwargs))[0]
                tensors = [a for a in leaves if isinstance(a, torch.Tensor)]
                here = step if isinstance(step, int) else step_of(step)
                attributes = tuple(tuple(sorted(t.__dict__)) for t in tensors)
                CALLS.append((here, tuple(t.data_ptr() for t in tensors), attributes, seen_now()))
            _depth[0] += 1
            try:
                return fn(*args, **kwargs)
            finally:
                _depth[0] -= 1

        if way:
            return bound_as(way, target.eager_break_during_capture, logged)
        return target.eager_break_during_capture(logged)

    return decorate


def tagged(t):
    """A view of t carrying a Python attribute, as structured-output code tags its logits: a
    fresh object per call, so that a value handed to several steps carries the attribute only
    where a step tagged it."""
    view = t.view(t.shape)
    view.bcg_tag = 'tagged'
    return view


def define_breaks():
    """Defines each break step anew."""
    global step_0
    # step 0: neg, run as an eager break
    @logged_break(0)
    def step_0(a0):
        return torch.neg(a0)


define_breaks()


def make_inputs(seed):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn((), generator=g).to(torch.float32).to(DEVICE),
    ]


def program(v0):
    v1 = step_0(tagged(v0))
    del v0
    return [v1]


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


def capture_once(pool):
    define_breaks()  # each capture's breaks keep state of their own
    static = [x.clone() for x in make_inputs(SEED)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        seed_rng(SEED)
        program(*static)  # eager warm-up
        capture = target.BreakableCUDAGraphCapture(**pool)
        seed_rng(SEED)
        CALLS.clear()
        with capture:
            outputs = program(*static)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    captured = list(CALLS)
    assert [call[0] for call in captured] == BREAK_STEPS, f"capture called breaks {captured}"
    return static, capture, outputs, captured, None


def replay_in_order(runs, order, first):
    for replay, which in enumerate(order, start=first):
        static, capture, outputs, captured, host = runs[which]
        where = f"replay {replay}" + (f" (capture {which})" if len(runs) > 1 else "")
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
        for call, want in zip(CALLS, captured):
            assert call == want, f"{where}: break call {call} (step, buffers, attributes, state), captured {want}"
        assert len(CALLS) == len(captured), f"{where}: break calls {CALLS}, captured {captured}"
        for index, (actual, want) in enumerate(zip(outputs, expected)):
            assert same(actual, want), f"{where}: output {index} differs from eager"
    return True


def main():
    if not replay_in_order([capture_once({})], [0] * REPLAYS, 0):
        return
    if CAPTURES > 1:
        # The capture set: CAPTURES captures of the program in one pool, each on inputs of
        # its own, as an engine captures its batch sizes, replayed in ORDER.
        pool = {"pool": torch.cuda.graph_pool_handle()}
        runs = [capture_once(pool) for _ in range(CAPTURES)]
        if not replay_in_order(runs, ORDER, REPLAYS):
            return
    print("reproducer passed: replay matched eager every time")


if __name__ == "__main__":
    # A call that never returns: every thread's stack, and exit 1.
    faulthandler.dump_traceback_later(240, exit=True)
    with simulated_cuda():
        main()
