"""A standalone script for an op that froze a host value: captured with the capture's
arguments, replayed, and compared with the op run eagerly on the step's arguments.

:func:`frozen_op_script` renders it from the two calls bisect recorded (the capture's and
the diverging step's), with random tensors of the recorded layouts. It returns None when an
argument has no Python spelling or the target cannot be imported by name. The script exits
1 while the op replays the capture's value, 0 when replay and eager agree.
"""

from __future__ import annotations

from typing import Any

import torch

from verification.bisect.trace import Layout
from verification.targets import Target


class _Unwritable(Exception):
    pass


def _literal(value: Any, tensors: list[Layout]) -> str:
    if isinstance(value, Layout):
        tensors.append(value)
        return f"t{len(tensors) - 1}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_literal(v, tensors) for v in value)
        return (
            f"[{inner}]"
            if isinstance(value, list)
            else f"({inner}{',' if len(value) == 1 else ''})"
        )
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_literal(v, tensors)}" for k, v in value.items()) + "}"
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, torch.device):
        return f"torch.device({value.type!r})"
    if isinstance(value, (bool, int, str, type(None))):
        return repr(value)
    if isinstance(value, float):
        return (
            repr(value)
            if value == value and abs(value) != float("inf")
            else f"float({str(value)!r})"
        )
    if isinstance(value, (torch.memory_format, torch.layout)):
        return str(value)
    raise _Unwritable(type(value).__name__)


def _make(name: str, layout: Layout) -> str:
    if layout.values is not None:
        return f"{name} = torch.tensor({layout.values!r}, dtype={layout.dtype})"
    device = ', device="cuda"' if layout.on_device else ""
    make = f"torch.empty_strided({layout.shape}, {layout.stride}, dtype={layout.dtype}{device})"
    if layout.dtype == torch.bool:
        fill = ".random_(0, 2)"
    elif layout.dtype.is_floating_point or layout.dtype.is_complex:
        fill = ".normal_()"
    else:
        fill = ".random_(0, 4)"
    return f"{name} = {make}{fill}"


def frozen_op_script(
    op: str, where: str, captured: Any, now: Any, step: int, target: Target, simulated: bool
) -> str | None:
    """The script for ``op`` called as ``captured`` (args, kwargs with Layouts) at capture and
    as ``now`` at step ``step``."""
    if not target.import_code or captured is None or now is None:
        return None
    tensors: list[Layout] = []
    try:
        then_args = _literal(list(captured[0]), tensors)[1:-1]
        then_kwargs = _literal(dict(captured[1]), tensors)
        now_tensors: list[Layout] = []
        now_args = _literal(list(now[0]), now_tensors)[1:-1]
        now_kwargs = _literal(dict(now[1]), now_tensors)
    except _Unwritable:
        return None
    if [(t.shape, t.dtype) for t in tensors] != [(t.shape, t.dtype) for t in now_tensors]:
        return None  # the tensors themselves changed: not one op's frozen host value
    # A host tensor whose values changed is updated in place between capture and replay, as
    # the model did: the script shows the replay keeping the value the capture read.
    updates = "".join(
        f"        t{i}.copy_(torch.tensor({b.values!r}, dtype={b.dtype}))\n"
        for i, (a, b) in enumerate(zip(tensors, now_tensors))
        if not b.on_device and b.values is not None and a.values != b.values
    )
    func = "torch.ops." + op
    then_args += "" if then_kwargs == "{}" else f", **{then_kwargs}"
    now_args += "" if now_kwargs == "{}" else f", **{now_kwargs}"
    inputs = "\n".join(f"    {_make(f't{i}', t)}" for i, t in enumerate(tensors))
    header = "from verification.sim import simulated_cuda\n" if simulated else ""
    run = "    with simulated_cuda():\n        main()\n" if simulated else "    main()\n"
    return f'''"""bisect reproducer: {op} at {where} keeps the host value it was captured with.

Captured with the capture's arguments and replayed, it is compared with the same op run
eagerly on step {step}'s arguments. Exit 1 while they differ.
"""

import torch
from torch.utils._pytree import tree_leaves

{target.import_code}
{header}

def main() -> None:
    torch.manual_seed(0)
{inputs}

    def at_capture():
        return {func}({then_args})

    def at_step():
        return {func}({now_args})

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        at_capture()  # warm-up
        with target.BreakableCUDAGraphCapture() as capture:
            replayed = at_capture()
{updates}        capture.replay()
        expected = at_step()
    torch.cuda.synchronize()
    pairs = list(zip(tree_leaves(replayed), tree_leaves(expected)))
    same = all(a.shape == b.shape and torch.equal(a, b) for a, b in pairs)
    print("replay equals eager" if same else "replay differs from eager: the host value is frozen")
    raise SystemExit(0 if same else 1)


if __name__ == "__main__":
{run}'''
