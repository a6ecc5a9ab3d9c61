"""Planted faulty break ops: each breaks one part of the contract its spec declares.

``FAULTY`` maps a spec attribute of this module to the contract part the diagnosis must
name for it; ``CLEAN`` and ``CLEAN_SIDE_STREAM`` are the op done right. Module state (``_HOST``, ``_STASH``,
``_GROWTH``) is the planted bug in three of them.
"""

from __future__ import annotations

import torch

from verification.userops.spec import BreakOpSpec, TensorArg

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
