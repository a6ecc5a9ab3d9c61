"""Capture rules that depend on an op's arguments or history, which its tags cannot express.

Measured on an H200: ``histc`` with its default range reads min and max on the host;
``repeat_interleave`` is capturable once ``output_size`` is given; a cuSOLVER op needs a
library handle, which cannot be created inside a capture, so it must run eagerly first.

First kernel use, in strict warm-up mode (:func:`strict_warmup`, or
``BCG_SIM_STRICT_WARMUP=1``): on the H200 an elementwise op on bfloat16, int8, int32 or bool
issued for the first time inside a capture, with no eager run of the same op and dtypes
before, made ``capture_end`` fail ("operation failed due to a previous error during
capture"). Whether a kernel is already loaded depends on everything the process ran before,
so the mode is opt-in; the harness turns it on, since its programs warm up eagerly first.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch

from verification.sim import state

aten = torch.ops.aten

Rule = Callable[[tuple, dict], bool]


def _histc_default_range(args: tuple, kwargs: dict) -> bool:
    low = args[2] if len(args) > 2 else kwargs.get("min", 0)
    high = args[3] if len(args) > 3 else kwargs.get("max", 0)
    return float(low) == float(high)


# Ops tagged data-dependent that a capture accepts under these arguments.
LEGAL_WHEN: dict[Any, Rule] = {
    aten.repeat_interleave.Tensor: lambda args, kwargs: kwargs.get("output_size") is not None,
    aten.repeat_interleave.self_Tensor: lambda args, kwargs: kwargs.get("output_size") is not None,
}
# Ops that copy to pageable host memory under these arguments (the H200 raises torch's
# pinned-memory error, which leaves the capture valid).
SYNCS_WHEN: dict[Any, Rule] = {aten.histc.default: _histc_default_range}
# Ops that need a library handle, created by their first eager run.
LIBRARY: dict[Any, str] = {
    op: "cusolver"
    for op in (
        aten.linalg_inv_ex.default,
        aten.linalg_lu_factor_ex.default,
        aten.linalg_lu_solve.default,
        aten._linalg_solve_ex.default,
        aten.linalg_cholesky_ex.default,
        aten.cholesky_solve.default,
        aten._linalg_eigh.default,
        aten.linalg_eig.default,
        aten.linalg_qr.default,
        aten._linalg_svd.default,
        aten.linalg_ldl_factor_ex.default,
    )
}


def host_copy(func: Any, args: tuple, kwargs: dict) -> bool:
    """Whether the op copies device data to pageable host memory under these arguments."""
    rule = SYNCS_WHEN.get(func)
    return rule is not None and rule(args, kwargs)


def refused(func: Any, illegal_by_tags: bool, args: tuple, kwargs: dict, warm: set[str]) -> bool:
    """Whether issuing ``func(*args, **kwargs)`` on a capturing stream fails."""
    if illegal_by_tags:
        legal = LEGAL_WHEN.get(func)
        return legal is None or not legal(args, kwargs)
    library = LIBRARY.get(func)
    return library is not None and library not in warm


def ran_eagerly(func: Any, warm: set[str]) -> None:
    library = LIBRARY.get(func)
    if library is not None:
        warm.add(library)


COLD_KERNEL_DTYPES = frozenset({torch.bfloat16, torch.int8, torch.int32, torch.bool})


_pointwise: dict[Any, bool] = {}


def kernel_key(func: Any, leaves: list[Any]) -> tuple[Any, ...] | None:
    """The kernel a pointwise op launches, if its first use inside a capture can fail;
    ``leaves`` are the call's flattened arguments, which dispatch already has."""
    pointwise = _pointwise.get(func)
    if pointwise is None:
        # Every eager device op asks; an overload's tags are a list behind a property.
        pointwise = _pointwise[func] = torch.Tag.pointwise in func.tags
    if not pointwise:
        return None
    dtypes = {t.dtype for t in leaves if isinstance(t, torch.Tensor)}
    if dtypes.isdisjoint(COLD_KERNEL_DTYPES):
        return None
    return (func, *sorted(map(str, dtypes)))


def strict_from_environment() -> bool:
    return os.environ.get("BCG_SIM_STRICT_WARMUP", "") not in ("", "0")


@contextlib.contextmanager
def strict_warmup() -> Iterator[None]:
    """Models the H200's first-kernel-use failure for the block (inside ``simulated_cuda()``)."""
    session = state.require()
    previous = session.strict_warmup
    session.strict_warmup = True
    try:
        yield
    finally:
        session.strict_warmup = previous
