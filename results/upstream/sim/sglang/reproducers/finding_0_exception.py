"""Reproducer for a exception finding (target-bug) in target verification.targets.sglang (sim).

[target-bug] exception: capture raised AssertionError() [at sglang/srt/model_executor/runner_backend_utils/breakable_cuda_graph/breakable_cuda_graph.py:447, in _end_current_segment]
Fuzzer command: python -m verification fuzz --target verification.targets.sglang --device sim --seed 0 --examples 5000 --max-ops 12 --max-breaks 4 --replays 3
Exits non-zero while the bug is present.
"""

import dataclasses
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
HOST_SEQUENCES = 1

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


NAMED = [None]


def at(step, fn):
    # fn, one break function shared by several steps, called for step.
    def call(*args, **kwargs):
        NAMED[0] = step
        return fn(*args, **kwargs)

    return call


def step_of(steps):
    named, NAMED[0] = NAMED[0], None
    if named is None:
        last = CALLS[-1][0] if CALLS else -1
        named = next((s for s in steps if s > last), steps[0])
    return named


@dataclasses.dataclass
class HostMeta:
    """What the runner prepares on the host before every run (vLLM's attention metadata)."""

    seq_lens: list
    num_tokens: int
    positions: torch.Tensor  # on the CPU
    # Tensors the forward computes into the metadata inside the captured region (rotary
    # cos/sin of the positions), by step: the runner keeps them, the graph rewrites them.
    rotary: dict = dataclasses.field(default_factory=dict)


def make_host(count, seed):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, 9, (count,), generator=g).tolist()
    return HostMeta(lens, sum(lens), torch.randint(0, 8, (count,), generator=g))


def update_host(host, seed):
    """Rewrites every field in place, as a runner does before a replay."""
    new = make_host(len(host.seq_lens), seed)
    host.seq_lens[:] = new.seq_lens
    host.num_tokens = new.num_tokens
    host.positions.copy_(new.positions)


def define_breaks():
    """Defines each break step anew."""
    global attention_0
    # break op attention: one decorated function called at steps [0]
    eager_break_during_capture = logged_break([0])
    import dataclasses
    import math

    import torch

    def host_total(host):
        if isinstance(host, torch.Tensor):
            return int(host.sum()) if host.device.type == "cpu" else 0
        if isinstance(host, int):
            return host
        if isinstance(host, dict):
            return sum(host_total(v) for v in host.values())
        if isinstance(host, (list, tuple)):
            return sum(host_total(v) for v in host)
        if dataclasses.is_dataclass(host):
            return sum(host_total(getattr(host, f.name)) for f in dataclasses.fields(host))
        return 0

    # As an engine's attention op: it writes into the tensor it is given and returns nothing.
    @eager_break_during_capture
    def attend_(x, host):
        # Its scale depends on the host's sequence lengths.
        x.mul_(1.0 / (1 + host_total(host) % 7))


    @eager_break_during_capture
    def block_(x, host):
        attend_(x, host)  # a decorated op calling another
        x.add_(host_total(host) % 3)


    def attention(x, host, *, nested):
        (block_ if nested else attend_)(x, host)
        return x


    attention_0 = attention


define_breaks()


def make_inputs(seed):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn((), generator=g).to(torch.float32).to(DEVICE),
        torch.randn((), generator=g).to(torch.float32).to(DEVICE),
    ]


def program(v0, v1, host):
    v2 = at(0, attention_0)(v0, host, nested=True)
    del v0
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


def capture_once(pool):
    define_breaks()  # each capture's breaks keep state of their own
    static = [x.clone() for x in make_inputs(SEED)]
    host = make_host(HOST_SEQUENCES, SEED)  # the runner's, rewritten before replays
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        seed_rng(SEED)
        program(*static, host)  # eager warm-up
        capture = target.BreakableCUDAGraphCapture(**pool)
        seed_rng(SEED)
        CALLS.clear()
        with capture:
            outputs = program(*static, host)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    captured = list(CALLS)
    assert [call[0] for call in captured] == BREAK_STEPS, f"capture called breaks {captured}"
    return static, capture, outputs, captured, host


def replay_in_order(runs, order, first):
    for replay, which in enumerate(order, start=first):
        static, capture, outputs, captured, host = runs[which]
        where = f"replay {replay}" + (f" (capture {which})" if len(runs) > 1 else "")
        seed = SEED + 1 + replay
        fresh = make_inputs(seed)
        define_breaks()  # the reference shares no state with the captured run's breaks
        seed_rng(seed)
        expected = program(*[x.clone() for x in fresh], make_host(HOST_SEQUENCES, seed))
        CALLS.clear()
        for buffer, value in zip(static, fresh):
            buffer.copy_(value)
        update_host(host, seed)
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
