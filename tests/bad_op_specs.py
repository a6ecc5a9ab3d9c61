"""Op specs ``fuzz-op`` must refuse with one line: each attribute is wrong in one way."""

from __future__ import annotations

import torch

from verification.userops.spec import BreakOpSpec, TensorArg


def scale(x: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(x * 2)


_X = TensorArg(("n",), torch.float32)

EMPTY_DIM_RANGE = BreakOpSpec(fn=scale, args={"x": _X, "out": _X}, dims={"n": (4, 2)})
BOUNDS_NEVER_MET = BreakOpSpec(
    fn=scale,
    args={"x": TensorArg(("n",), torch.int64, low=8, high="n"), "out": _X},
    dims={"n": (1, 4)},
)
UNDECLARED_DIM = BreakOpSpec(fn=scale, args={"x": TensorArg(("m",)), "out": _X}, dims={"n": (1, 4)})
ARG_NOT_TAKEN = BreakOpSpec(fn=scale, args={"y": _X, "out": _X}, dims={"n": (1, 4)})
NOT_A_SPEC = {"fn": scale}


def index_op(x: torch.Tensor, idx: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(x[idx])


_IDX = TensorArg(("n",), torch.int64, low=0, high="n-1")


def _index_spec(**changes) -> BreakOpSpec:
    fields = {
        "fn": index_op,
        "args": {"x": _X, "idx": _IDX, "out": _X},
        "dims": {"n": (1, 4)},
        "writes": ("out",),
    }
    return BreakOpSpec(**(fields | changes))


def _with_idx(arg: TensorArg) -> BreakOpSpec:
    return _index_spec(args={"x": _X, "idx": arg, "out": _X})


# Malformed specs of each kind an engine op's author may write, several of each.
DIM_NOT_A_RANGE = _index_spec(dims={"n": 4})
PARAM_NOT_A_STRATEGY = BreakOpSpec(
    fn=lambda x, out, *, threshold: None,
    args={"x": _X, "out": _X},
    dims={"n": (1, 4)},
    writes=("out",),
    params={"threshold": 0.5},
)
SHAPE_IS_A_STRING = _index_spec(args={"x": TensorArg("n"), "idx": _IDX, "out": _X})
WRITES_IS_A_STRING = _index_spec(writes="out")
ARG_NOT_A_TENSOR_ARG = _index_spec(args={"x": ("n",), "idx": _IDX, "out": _X})
NOT_A_DIM_EXPRESSION = _with_idx(TensorArg(("n",), torch.int64, low=0, high="n -"))
EXPRESSION_NAMES_UNKNOWN_DIM = _with_idx(TensorArg(("n",), torch.int64, low=0, high="m-1"))
UNIQUE_WITHOUT_ROOM = _with_idx(TensorArg(("n",), torch.int64, low=0, high=1, unique=True))
UNIQUE_FLOATS = _with_idx(TensorArg(("n",), torch.float32, low=0, high=8, unique=True))
UNIQUE_UNBOUNDED = _with_idx(TensorArg(("n",), torch.int64, unique=True))
SENTINEL_DOES_NOT_FIT = _with_idx(TensorArg(("n",), torch.uint8, low=0, high=3, sentinel=-1))
RATE_WITHOUT_SENTINEL = _with_idx(TensorArg(("n",), torch.int64, low=0, high=3, sentinel_rate=0.5))
RATE_OUT_OF_RANGE = _with_idx(
    TensorArg(("n",), torch.int64, low=0, high=3, sentinel=-1, sentinel_rate=1.5)
)
BOUNDS_ON_OVERWRITTEN = _index_spec(writes=("out", "idx"))
WRITES_AND_INOUT = _index_spec(inout=("out",))
INOUT_NOT_AN_ARG = _index_spec(inout=("cache",))
PARTIAL_NOT_WRITTEN = _index_spec(partial={"x": None})
PARTIAL_NOT_A_FUNCTION = _index_spec(partial={"out": "rows"})
BOUND_DOES_NOT_FIT_DTYPE = _with_idx(TensorArg(("n",), torch.int8, low=0, high=300))
