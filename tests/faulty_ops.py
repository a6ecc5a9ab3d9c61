"""Planted faulty break ops: each breaks one part of the contract its spec declares.

``FAULTY`` maps a spec attribute of this module to the contract part the diagnosis must
name for it; ``CLEAN`` and ``CLEAN_SIDE_STREAM`` are the op done right. Module state (``_HOST``, ``_STASH``,
``_GROWTH``) is the planted bug in three of them.
"""

from __future__ import annotations

import torch

from verification import BreakOpSpec, TensorArg

_X = TensorArg(("n",), torch.float32)
_OUT = TensorArg(("n",), torch.float32)
_DIMS = {"n": (1, 16)}


def clean_scale(x: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(x * 2)


def fresh_return(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    return x * 2  # declared to write out, fills a fresh tensor instead


def writes_undeclared(x: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(x.mul_(2))  # scales its input in place too


_HOST: dict[str, list[int]] = {}


def frozen_lengths(x: torch.Tensor, lengths: torch.Tensor, out: torch.Tensor) -> None:
    # Host lengths cached on the first call (the capture): replay uses stale lengths.
    host = _HOST.setdefault(f"lengths{lengths.numel()}", lengths.tolist())
    keep = torch.tensor([min(max(int(n), 0), x.numel()) for n in host], device=x.device)
    out.copy_(x * keep.to(x.dtype))


_STASH: dict[str, torch.Tensor] = {}


def stashed_scale(x: torch.Tensor, out: torch.Tensor) -> None:
    # A tensor made on the first call (the capture) is kept and read by every later call.
    scaled = _STASH.setdefault(f"scaled{x.numel()}", x * 2)
    out.copy_(scaled)


def unjoined_side_stream(x: torch.Tensor, out: torch.Tensor) -> None:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        # Into `out` directly: a temporary on a fresh stream would be a new cudaMalloc on the
        # GPU every call, a second broken contract part; this op breaks only the join.
        torch.mul(x, 2, out=out)
    # missing: torch.cuda.current_stream().wait_stream(side)


def joined_side_stream(x: torch.Tensor, out: torch.Tensor) -> None:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.mul(x, 2, out=out)
    done = torch.cuda.Event()
    done.record(side)
    done.wait(torch.cuda.current_stream())  # joined through an event: correct


def synchronizing_scale(x: torch.Tensor, out: torch.Tensor) -> None:
    torch.cuda.synchronize()  # "to be safe": breaks another thread's global-mode capture
    out.copy_(x * 2)


_GROWTH = [0]


def growing_workspace(x: torch.Tensor, out: torch.Tensor) -> None:
    # A workspace 1 MiB larger on every call: no cached block fits, so always a cudaMalloc.
    _GROWTH[0] += 1
    workspace = torch.empty(x.numel() + (1 << 18) * _GROWTH[0], device=x.device)
    workspace[: x.numel()].copy_(x * 2)
    out.copy_(workspace[: x.numel()])


def _spec(fn, **args: TensorArg) -> BreakOpSpec:
    return BreakOpSpec(fn=fn, args=args or {"x": _X, "out": _OUT}, dims=_DIMS, writes=("out",))


CLEAN = _spec(clean_scale)
CLEAN_SIDE_STREAM = _spec(joined_side_stream)
FRESH_RETURN = _spec(fresh_return)
WRITES_UNDECLARED = _spec(writes_undeclared)
FROZEN_HOST_VALUE = _spec(
    frozen_lengths, x=_X, lengths=TensorArg(("n",), torch.int64, low=0, high="n"), out=_OUT
)
STASHED_TENSOR = _spec(stashed_scale)
UNJOINED_STREAM = _spec(unjoined_side_stream)
SYNCHRONIZES = _spec(synchronizing_scale)
ALLOCATES_IN_CAPTURE = _spec(growing_workspace)

FAULTY: dict[str, str] = {
    "FRESH_RETURN": "declared writes",
    "WRITES_UNDECLARED": "declared writes",
    "FROZEN_HOST_VALUE": "no state across calls",
    "STASHED_TENSOR": "no state across calls",
    "UNJOINED_STREAM": "streams joined",
    "SYNCHRONIZES": "concurrent capture",
    "ALLOCATES_IN_CAPTURE": "concurrent capture",
}


_BY_ADDRESS: dict[tuple[int, int], list[int]] = {}


def lengths_by_address(x: torch.Tensor, lengths: torch.Tensor, out: torch.Tensor) -> None:
    # Host lengths cached per buffer address: a replay (same buffers) reuses the capture's.
    host = _BY_ADDRESS.setdefault((lengths.data_ptr(), lengths.numel()), lengths.tolist())
    keep = torch.tensor([min(max(int(n), 0), x.numel()) for n in host], device=x.device)
    out.copy_(x * keep.to(x.dtype))


FROZEN_BY_ADDRESS = _spec(
    lengths_by_address, x=_X, lengths=TensorArg(("n",), torch.int64, low=0, high="n"), out=_OUT
)
FAULTY["FROZEN_BY_ADDRESS"] = "no state across calls"


_WORKSPACES: dict[tuple[int, int], torch.Tensor] = {}


def mean_by_buffer(x: torch.Tensor, out: torch.Tensor) -> None:
    # A workspace per buffer, keyed by its storage: right for one size, but every size of a
    # capture set slices one buffer, so a smaller size sums rows a larger one left behind.
    storage = x.untyped_storage()
    rows = storage.nbytes() // x.element_size()
    workspace = _WORKSPACES.setdefault(
        (storage.data_ptr(), rows), torch.zeros(rows, dtype=x.dtype, device=x.device)
    )
    workspace[: x.shape[0]].copy_(x)
    out.copy_((workspace.sum() / x.shape[0]).expand_as(out))


WORKSPACE_PER_BUFFER = _spec(mean_by_buffer)


# The spec vocabulary for real ops: each feature below has a correct op (in CLEAN_FEATURES)
# and a planted op breaking it (in FAULTY_FEATURES, with the part the diagnosis must name).


def _rows_written(slots: torch.Tensor, rows: int) -> torch.Tensor:
    """A (rows, 1) mask: True on the rows that valid (non-negative) slots name."""
    mask = torch.zeros(rows, 1, dtype=torch.bool)
    valid = slots.cpu()
    return mask.index_fill_(0, valid[valid >= 0], True)


def scatter_rows(src: torch.Tensor, slots: torch.Tensor, out: torch.Tensor) -> None:
    # -1 marks a padding token: nothing written. Values past the end are capture-time garbage.
    valid = (slots >= 0) & (slots < out.shape[0])
    out.index_copy_(0, slots[valid], src[valid])


def scatter_rows_padding_too(src: torch.Tensor, slots: torch.Tensor, out: torch.Tensor) -> None:
    out[slots] = src  # slot -1 indexes the last row: padding overwrites a real slot


def _scatter_spec(fn) -> BreakOpSpec:
    return BreakOpSpec(
        fn=fn,
        args={
            "src": TensorArg(("tokens", "d"), torch.float32),
            "slots": TensorArg(
                ("tokens",), torch.int64, low=0, high="rows-1", unique=True, sentinel=-1
            ),
            "out": TensorArg(("rows", "d"), torch.float32),
        },
        dims={"tokens": (1, 6), "rows": (6, 10), "d": (1, 3)},
        writes=("out",),
        partial={"out": lambda slots, out, **_: _rows_written(slots, out.shape[0])},
    )


def add_counts(x: torch.Tensor, counts: torch.Tensor) -> None:
    counts.add_(x)  # read-modify-write


def gather_rows(x: torch.Tensor, positions: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(x[positions.clamp(0, x.numel() - 1)])  # clamped: capture-time garbage


def gather_next_rows(x: torch.Tensor, positions: torch.Tensor, out: torch.Tensor) -> None:
    # Reads the position after each one: past the end when a position is n-1.
    out.copy_(torch.stack([x[p + 1] for p in positions.tolist()]))


def _gather_spec(fn) -> BreakOpSpec:
    return BreakOpSpec(
        fn=fn,
        args={
            "x": TensorArg(("n",), torch.float32),
            "positions": TensorArg(("m",), torch.int64, low=0, high="n-1"),
            "out": TensorArg(("m",), torch.float32),
        },
        dims={"n": (1, 8), "m": (1, 8)},
        writes=("out",),
    )


def unpermute(src: torch.Tensor, order: torch.Tensor, out: torch.Tensor) -> None:
    # The inverse of a permutation, built on the host. Not a permutation only at capture
    # (garbage values): the gaps read row 0 then.
    where = {slot: i for i, slot in enumerate(order.tolist())}
    rows = [where.get(r, 0) for r in range(order.numel())]
    out.copy_(src[torch.tensor(rows, device=src.device)])


def unpermute_strict(src: torch.Tensor, order: torch.Tensor, out: torch.Tensor) -> None:
    # The same inverse, trusting the values: a repeated value leaves a gap, a KeyError.
    where = {slot: i for i, slot in enumerate(order.tolist())}
    rows = [where[r] for r in range(order.numel())]
    out.copy_(src[torch.tensor(rows, device=src.device)])


def _unpermute_spec(unique: bool) -> BreakOpSpec:
    return BreakOpSpec(
        fn=unpermute if unique else unpermute_strict,
        args={
            "src": TensorArg(("n",), torch.float32),
            "order": TensorArg(("n",), torch.int64, low=0, high="n-1", unique=unique),
            "out": TensorArg(("n",), torch.float32),
        },
        dims={"n": (1, 8)},
        writes=("out",),
    )


_COUNTS = TensorArg(("n",), torch.int32, low=0, high=100)
_STEPS = TensorArg(("n",), torch.int32, low=0, high=3)

MASKED_SCATTER = _scatter_spec(scatter_rows)
WRITES_OUTSIDE_MASK = _scatter_spec(scatter_rows_padding_too)
INOUT_COUNTS = BreakOpSpec(
    fn=add_counts, args={"x": _STEPS, "counts": _COUNTS}, dims=_DIMS, inout=("counts",)
)
WRITES_READ_ONLY = BreakOpSpec(fn=add_counts, args={"x": _STEPS, "counts": _COUNTS}, dims=_DIMS)
BOUNDED_GATHER = _gather_spec(gather_rows)
READS_PAST_BOUND = _gather_spec(gather_next_rows)
UNIQUE_UNPERMUTE = _unpermute_spec(unique=True)
NEEDS_UNIQUE = _unpermute_spec(unique=False)

CLEAN_FEATURES = ("MASKED_SCATTER", "INOUT_COUNTS", "BOUNDED_GATHER", "UNIQUE_UNPERMUTE")
FAULTY_FEATURES: dict[str, str] = {
    "WRITES_OUTSIDE_MASK": "masked writes",
    "WRITES_READ_ONLY": "declared writes",
    "READS_PAST_BOUND": "index bounds",
    "NEEDS_UNIQUE": "unique indices",
}
FAULTY.update(FAULTY_FEATURES)


def gather_trusting(x: torch.Tensor, positions: torch.Tensor, out: torch.Tensor) -> None:
    # Trusts its indices at capture too, where they are garbage: an IndexError there (on a
    # GPU a device-side assert, so it is planted for the simulator only).
    out.copy_(x[positions])


# Keeps every part of the contract checked on its own; the campaign finds it at capture.
TRUSTS_CAPTURE_VALUES = _gather_spec(gather_trusting)


# Float8 and outputs read before they are written. A per-tensor float8 quantization (the
# scale from a host read) done right, and with the scale cached on the first call; a stop
# mask done right, and one that only sets flags (it reads its write-only output).


def _float8_scale(x: torch.Tensor) -> float:
    amax = float(x.float().abs().amax())
    # NaN or inf (capture-time garbage) becomes a finite scale: the op must not raise then.
    return max(amax, 1e-6) / 448.0 if amax == amax and amax < float("inf") else 1.0


def quantize_float8(x: torch.Tensor, out: torch.Tensor, scale: torch.Tensor) -> None:
    s = _float8_scale(x)
    out.copy_((x.float() / s).clamp(-448, 448).to(torch.float8_e4m3fn))
    scale.fill_(s)


_SCALES: dict[tuple[int, ...], float] = {}


def quantize_float8_cached_scale(x: torch.Tensor, out: torch.Tensor, scale: torch.Tensor) -> None:
    # The scale is computed once per shape: the capture's scale is reused by every replay.
    s = _SCALES.setdefault(tuple(x.shape), _float8_scale(x))
    out.copy_((x.float() / s).clamp(-448, 448).to(torch.float8_e4m3fn))
    scale.fill_(s)


def _quant_spec(fn) -> BreakOpSpec:
    return BreakOpSpec(
        fn=fn,
        args={
            "x": TensorArg(("tokens", "hidden"), (torch.float32, torch.bfloat16)),
            "out": TensorArg(("tokens", "hidden"), torch.float8_e4m3fn),
            "scale": TensorArg((1,), torch.float32),
        },
        dims={"tokens": (1, 8), "hidden": (1, 16)},
        writes=("out", "scale"),
        # A tolerance on the scale; float8 outputs still compare exactly.
        rtol=1e-3,
        atol=1e-3,
    )


def stop_mask(tokens: torch.Tensor, eos: torch.Tensor, finished: torch.Tensor) -> None:
    finished.copy_(tokens == eos)


def sticky_stop_mask(tokens: torch.Tensor, eos: torch.Tensor, finished: torch.Tensor) -> None:
    finished |= tokens == eos  # sets flags, never clears them: reads its previous contents


def _stop_spec(fn) -> BreakOpSpec:
    return BreakOpSpec(
        fn=fn,
        args={
            "tokens": TensorArg(("batch",), torch.int64, low=0, high=3),
            "eos": TensorArg((1,), torch.int64, low=0, high=3),
            "finished": TensorArg(("batch",), torch.bool),
        },
        dims={"batch": (1, 8)},
        writes=("finished",),
    )


FLOAT8_QUANT = _quant_spec(quantize_float8)
FLOAT8_CACHED_SCALE = _quant_spec(quantize_float8_cached_scale)
STOP_MASK = _stop_spec(stop_mask)
STICKY_STOP_MASK = _stop_spec(sticky_stop_mask)
FAULTY["FLOAT8_CACHED_SCALE"] = "no state across calls"
FAULTY["STICKY_STOP_MASK"] = "declared writes"
