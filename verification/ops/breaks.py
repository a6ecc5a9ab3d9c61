"""Break ops: work a CUDA graph cannot capture (host syncs, data-dependent shapes and control
flow, host round trips, side streams, RNG), the reason breaks exist.

Each op is standalone Python ``source`` whose uncapturable functions carry the decorator
``eager_break_during_capture``; ``entry`` is what a program step calls. Every op is a
deterministic function of its inputs' values (except ``rng=True`` ones), tolerates NaN
inputs, and either writes into an input listed in ``mutates`` or returns a fresh tensor.

``ENGINE_OPS`` are the breaks of an engine's forward pass: each takes one tensor and the
program's host values (:mod:`verification.ops.host`, in any of its forms) and reads those at
every call. They are drawn only by engine-shaped programs, which share one decorated function
among several steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis import strategies as st

from verification.ops import rules
from verification.ops.spec import OpSpec, Params, TensorMeta

Infer = Callable[[Sequence[TensorMeta], Params], Any]

HEADER = "import dataclasses\nimport math\n\nimport torch\n\n"


def _float_same(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    return metas[0] if rules.is_float(metas[0]) else None


def _arith_same(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    return metas[0] if rules.is_arith(metas[0]) else None


def _into_buffer(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    """(values, buffer): results land in the buffer, whatever its shape and dtype."""
    return metas[1] if rules.is_arith(metas[0]) else None


def _selected_into(name: str, select: str) -> OpSpec:
    """A break that writes the data-dependent selection ``select`` of ``x`` (as many elements
    as fit) into ``out``, zeros after it: the shape of the selection is known only eagerly."""
    source = f"""
@eager_break_during_capture
def {name}(x, out):
    picked = {select}
    flat = torch.zeros(out.numel(), dtype=out.dtype, device=out.device)
    n = min(picked.numel(), flat.numel())
    flat[:n] = picked[:n].to(out.dtype)
    out.copy_(flat.view(out.shape))
    return out
"""
    return break_op(
        name, 2, _into_buffer, source, f"{name}({{0}}, {{1}})", mutates=(1,), aliasing="out"
    )


def _ranks(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    return TensorMeta(metas[0].shape, torch.int64) if rules.is_arith(metas[0]) else None


def _float_pair(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    a, b = metas
    return a if rules.is_float(a) and a == b else None


def _float_both(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    return metas[0] if rules.is_float(metas[0]) and rules.is_float(metas[1]) else None


def _applies_always(metas: Sequence[TensorMeta], p: Params) -> TensorMeta | None:
    return metas[0]


def _weight(metas: Sequence[TensorMeta]) -> st.SearchStrategy[dict[str, Any]]:
    return st.sampled_from([0.25, 0.5, 0.75]).map(lambda w: {"weight": w})


def break_op(name: str, arity: int, infer: Infer, body: str, expr: str, **extra: Any) -> OpSpec:
    """A break op whose entry is the function named ``name``."""
    return OpSpec(
        name,
        arity,
        infer,
        expr,
        source=HEADER + body.strip() + "\n",
        entry=name,
        kind="break",
        **extra,
    )


# A finite peak magnitude of a tensor, 0.0 for NaN/inf/empty: the guard every .item() uses.
PEAK = """
def finite_peak(x):
    peak = float(x.abs().amax().item()) if x.numel() else 0.0
    return peak if math.isfinite(peak) else 0.0
"""

OPS: list[OpSpec] = [
    break_op(
        "scale_by_item",
        1,
        _float_same,
        PEAK
        + """
@eager_break_during_capture
def scale_by_item(x):
    return x * (1.0 / (1.0 + finite_peak(x)))
""",
        "scale_by_item({0})",
    ),
    break_op(
        "normalize_",
        1,
        _float_same,
        PEAK
        + """
@eager_break_during_capture
def normalize_(x):
    return x.div_(max(1.0, finite_peak(x)))
""",
        "normalize_({0})",
        mutates=(0,),
        aliasing="inplace",
    ),
    _selected_into("nonzero_into", "torch.nonzero(x.reshape(-1) > 0).reshape(-1)"),
    _selected_into("masked_select_into", "torch.masked_select(x, x > 0)"),
    break_op(
        "clear_negatives_",
        1,
        _arith_same,
        """
@eager_break_during_capture
def clear_negatives_(x):
    x[x < 0] = 0
    return x
""",
        "clear_negatives_({0})",
        mutates=(0,),
        aliasing="inplace",
    ),
    break_op(
        "branch_on_sign",
        1,
        _float_same,
        """
@eager_break_during_capture
def branch_on_sign(x):
    total = float(torch.nan_to_num(x.float()).sum())
    if total > 0:
        return torch.tanh(x)
    return x * 2
""",
        "branch_on_sign({0})",
    ),
    break_op(
        "host_round_trip",
        1,
        _arith_same,
        """
@eager_break_during_capture
def host_round_trip(x):
    host = x.cpu()
    return (host * 2 + 1).to(x.device)
""",
        "host_round_trip({0})",
    ),
    break_op(
        "halve_until_small",
        1,
        _float_same,
        PEAK
        + """
@eager_break_during_capture
def halve_until_small(x):
    peak, steps = finite_peak(x), 0
    while peak > 1.0 and steps < 8:
        peak, steps = peak / 2, steps + 1
    out = x.clone()
    for _ in range(steps):
        out = out * 0.5
    return out
""",
        "halve_until_small({0})",
    ),
    break_op(
        "side_stream_scale",
        1,
        _arith_same,
        """
@eager_break_during_capture
def side_stream_scale(x):
    out = torch.empty_like(x)
    # The simulator patches torch.cuda, so is_available() is True there; plain CPU skips.
    if x.is_cuda or torch.cuda.is_available():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            out.copy_(x * 3)
        torch.cuda.current_stream().wait_stream(side)
    else:
        out.copy_(x * 3)
    return out
""",
        "side_stream_scale({0})",
    ),
    break_op(
        "add_noise",
        1,
        _float_same,
        """
@eager_break_during_capture
def add_noise(x):
    return x + 0.01 * torch.randn_like(x)
""",
        "add_noise({0})",
        rng=True,
    ),
    break_op(
        "rank_via_host",
        1,
        _ranks,
        """
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
""",
        "rank_via_host({0})",
    ),
    break_op(
        "blend",
        2,
        _float_pair,
        PEAK
        + """
@eager_break_during_capture
def blend_by_peak(x, *, other, weight):
    w = weight if finite_peak(other) < 1e4 else 0.0
    return x * (1 - w) + other * w


def blend(x, y, *, weight):
    return blend_by_peak(x, other=y, weight=weight)
""",
        "blend({0}, {1}, weight={weight})",
        params=_weight,
    ),
    break_op(
        "outer_twice",
        1,
        _float_same,
        PEAK
        + """
@eager_break_during_capture
def inner_shrink(x):
    return x / (1.0 + finite_peak(x))


@eager_break_during_capture
def outer_twice(x):
    return inner_shrink(inner_shrink(x) + 1)
""",
        "outer_twice({0})",
    ),
    break_op(
        "pair_mix",
        2,
        _float_pair,
        PEAK
        + """
@dataclasses.dataclass
class Pair:
    first: torch.Tensor
    second: torch.Tensor


@eager_break_during_capture
def mix_pair(pair):
    gate = 1.0 if finite_peak(pair.second) > 1.0 else 0.5
    return pair.first * gate + pair.second


def pair_mix(x, y):
    return mix_pair(Pair(first=x, second=y))
""",
        "pair_mix({0}, {1})",
    ),
    break_op(
        "dict_mix",
        2,
        _float_pair,
        PEAK
        + """
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
""",
        "dict_mix({0}, {1})",
    ),
    break_op(
        "shrink_pair_",
        2,
        _float_both,
        PEAK
        + """
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
""",
        "shrink_pair_({0}, {1})",
        mutates=(0, 1),
        aliasing="inplace",
    ),
    break_op(
        "do_nothing",
        1,
        _applies_always,
        """
@eager_break_during_capture
def do_nothing(x):
    return None
""",
        "do_nothing({0})",
        outputs=0,
    ),
]


# Every int and CPU tensor in a host value, summed, whatever form the step passes it in.
HOST_READ = """
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
"""


def _nested(metas: Sequence[TensorMeta]) -> st.SearchStrategy[dict[str, Any]]:
    return st.booleans().map(lambda nested: {"nested": nested})


def _view(metas: Sequence[TensorMeta]) -> st.SearchStrategy[dict[str, Any]]:
    return st.booleans().map(lambda view: {"view": view})


def _keyed(metas: Sequence[TensorMeta]) -> st.SearchStrategy[dict[str, Any]]:
    # The step's own key; the generator sets it to the step's position (ENGINE_KEY).
    return st.just({ENGINE_KEY: 0})


# The param of an engine op that the generator sets to the step's position, unique in its
# program: what a step stores in the runner's metadata no later step overwrites.
ENGINE_KEY = "key"


ENGINE_OPS: list[OpSpec] = [
    break_op(
        "attention",
        1,
        _float_same,
        HOST_READ
        + """
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
""",
        "attention({0}, {host}, nested={nested})",
        params=_nested,
        mutates=(0,),
        aliasing="inplace",
    ),
    break_op(
        "logit_bias",
        1,
        _float_same,
        HOST_READ
        + """
@eager_break_during_capture
def logit_bias(logits, host, *, view):
    bias = host_total(host) % 3
    if bias == 0:
        # Nothing to do: the input itself (or a view of it), as logits processors return.
        return logits.view(logits.shape) if view else logits
    return logits + bias
""",
        "logit_bias({0}, {host}, view={view})",
        params=_view,
        # Its result may share the argument's memory (generation treats it as a view).
        aliasing="view",
        alias_varies=True,
    ),
    break_op(
        "rotary",
        1,
        _float_same,
        HOST_READ
        + """
# The runner's metadata also holds a tensor the forward computes inside the captured region
# (cos of the positions), and the runner rewrites its lengths in place before every replay:
# at replay the break must be given the runner's object, which a capture that copies it
# (to swap the tensor for a non-owning alias, say) does not do.
# What a step hands when its host form holds no metadata object: made per call.
@dataclasses.dataclass
class Scratch:
    rotary: dict


@eager_break_during_capture
def rotate_(x, host, meta, *, key):
    x.mul_(1.0 / (1 + host_total(host) % 7)).add_(meta.rotary[key])


def rotary(x, host, *, key):
    meta = host["meta"] if isinstance(host, dict) else host
    if not hasattr(meta, "rotary"):
        meta = Scratch({})
    meta.rotary[key] = torch.cos(x)
    rotate_(x, host, meta, key=key)
    return x
""",
        "rotary({0}, {host}, key={key})",
        params=_keyed,
        mutates=(0,),
        aliasing="inplace",
    ),
]
