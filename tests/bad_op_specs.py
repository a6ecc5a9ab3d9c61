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
