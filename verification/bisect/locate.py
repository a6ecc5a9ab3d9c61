"""Narrows a :class:`~verification.bisect.compare.Difference` down to one op of the user's.

For a graph segment it first compares what the capture recorded with what the eager run did
(:func:`structural`): an op eager ran that the capture never recorded (a host-side branch
went the other way), an op reading another tensor from outside the forward than at capture
(the user rebound it instead of copying into it), or an op whose non-tensor arguments,
tensor layouts or host-tensor values differ from the capture's (a host value frozen at
capture; a **host scalar** when it is an operand passed by value, a 0-dim CPU tensor or a
Python number). When the capture agrees with eager, :func:`by_forced_breaks` runs the segment's
ops as eager breaks of the target and names the first whose replayed output differs. A break
whose inputs agree but whose results differ is narrowed by :func:`in_break_body`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from verification.bisect.compare import Tolerance, describe, first_diff
from verification.bisect.trace import Layout, OpRecord, Site, Trace


@dataclass(frozen=True)
class Culprit:
    """The op named, why, and the first tensor that shows it."""

    kind: str
    op: str
    site: Site | None
    reason: str
    tensor: str = ""
    calls: tuple[Any, Any] | None = None  # the op's call at capture and now, for a reproducer


def _where(site: Site | None) -> str:
    return f"{site[0]}:{site[1]}" if site else "?"


def structural(capture: Trace, warmup: Trace, eager: Trace, upto: int) -> Culprit | None:
    """The first graph op, in segments ``0..upto``, that the capture froze differently."""
    for segment in range(upto + 1):
        captured, before, now = (
            capture.graph_ops(segment),
            warmup.graph_ops(segment),
            eager.graph_ops(segment),
        )
        for i in range(max(len(captured), len(now))):
            c = captured[i] if i < len(captured) else None
            e = now[i] if i < len(now) else None
            if c is None or e is None or (c.name, c.site) != (e.name, e.site):
                if e is not None:
                    recorded = (
                        f"the capture recorded {c.name} at {_where(c.site)} there"
                        if c is not None
                        else "the capture recorded nothing more in this segment"
                    )
                    return Culprit(
                        "host branch",
                        e.name,
                        e.site,
                        f"eager runs it but the capture never recorded it: {recorded}; a "
                        "host-side branch went the other way at capture",
                    )
                return Culprit(
                    "host branch",
                    c.name,
                    c.site,
                    "the capture recorded it but eager no longer runs it: a host-side branch "
                    "went the other way at capture",
                )
            w = before[i] if i < len(before) else None
            if w is not None and (w.name, w.site) == (e.name, e.site) and w.external != e.external:
                moved = sorted({pos for pos, _ in set(w.external) ^ set(e.external)})
                return Culprit(
                    "rebound tensor",
                    e.name,
                    e.site,
                    f"its tensor argument {moved[0]} is another tensor than at capture: the graph "
                    "still reads the old one; copy new values into the static tensor "
                    "(.copy_) instead of rebinding the name",
                )
            if c.signature != e.signature:
                j = next(
                    (j for j, (a, b) in enumerate(zip(c.signature, e.signature)) if a != b),
                    min(len(c.signature), len(e.signature)),
                )
                scalar = host_scalar(c, e, j)
                if scalar is not None:
                    return scalar
                then = c.signature[j] if j < len(c.signature) else "nothing"
                now = e.signature[j] if j < len(e.signature) else "nothing"
                return Culprit(
                    "frozen host value",
                    e.name,
                    e.site,
                    f"its argument {j} was {_short(then)} at capture and is {_short(now)} "
                    "eagerly now: the graph replays the capture's host value (pass it in a "
                    "device tensor copied into each step, or make the op a break)",
                    calls=(c.call, e.call),
                )
    return None


def _argument(op: OpRecord, j: int) -> tuple[Any, str] | None:
    """Argument ``j`` of a graph op's recorded call (tensors as Layouts) and its schema type."""
    if op.call is None or op.func is None:
        return None
    args, kwargs = op.call
    schema = op.func._schema.arguments
    if j < len(args):
        return (args[j], str(schema[j].type)) if j < len(schema) else None
    names = list(kwargs)
    if j - len(args) >= len(names):
        return None
    name = names[j - len(args)]
    spec = next((a for a in schema if a.name == name), None)
    return (kwargs[name], str(spec.type)) if spec is not None else None


# Schema types a kernel takes by value: a Python number passed there, or a 0-dim CPU tensor
# passed as a Tensor, is read when the op is issued (at capture) and baked into the graph.
_BY_VALUE = ("Tensor", "number", "Optional[number]", "Optional[Tensor]")


def host_scalar(captured: OpRecord, eager: OpRecord, j: int) -> Culprit | None:
    """Culprit for a device op whose operand ``j`` is a host scalar (a 0-dim CPU tensor or a
    Python number) that changed since capture; None when ``j`` is anything else."""
    then, now = _argument(captured, j), _argument(eager, j)
    if then is None or now is None or not eager.device or then[1] not in _BY_VALUE:
        return None
    (old, _), (new, _) = then, now
    if isinstance(old, Layout) and isinstance(new, Layout):
        if old.on_device or new.on_device or old.shape != () or new.shape != ():
            return None
        what = "a 0-dim CPU tensor"
        fix = (
            'create it on the device (torch.tensor(..., device="cuda")) and update it in '
            "place (fill_, copy_), or copy it into a device tensor each step"
        )
        old, new = old.values, new.values
    elif isinstance(old, (int, float)) and isinstance(new, (int, float)):
        what = "a Python number read from host state"
        fix = (
            "keep it in a device tensor updated in place each step (fill_, copy_), "
            "or make the op a break"
        )
    else:
        return None
    return Culprit(
        "host scalar",
        eager.name,
        eager.site,
        f"its operand {j} is {what}: {old!r} at capture, {new!r} now. CUDA passes a host "
        f"scalar to the kernel by value when the op is issued, so the capture baked {old!r} "
        f"into the graph and every replay uses it: {fix}",
        calls=(captured.call, eager.call),
    )


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _producer(trace: Trace, op: OpRecord, ptr: int) -> tuple[str, OpRecord | None, int | None]:
    """Who last made storage ``ptr`` before ``op`` in an eager trace: an op, a break, or no one."""
    for earlier in reversed(trace.ops[: op.index]):
        if ptr in earlier.output_ptrs and not earlier.view:
            return "op", earlier, None
    for brk in reversed(trace.breaks):
        if ptr in brk.result_ptrs:
            return "break", None, brk.index
    return "external", None, None


def _explain_inputs(
    trace: Trace, op: OpRecord, inputs: list[torch.Tensor], replayed: list[torch.Tensor], i: int
) -> tuple[str, str]:
    """Why input ``i`` of ``op`` differs at replay: (kind, reason)."""
    ptr = op.input_ptrs[i] if i < len(op.input_ptrs) else 0
    who, maker, brk = _producer(trace, op, ptr)
    shown = describe(
        inputs[i] if i < len(inputs) else None, replayed[i] if i < len(replayed) else None
    )
    if who == "op" and maker is not None and maker.in_break is not None:
        who, brk = "break", maker.in_break  # made inside a break's body: the break's result
    if who == "break":
        name = trace.breaks[brk].name if brk is not None else "?"
        return (
            "stale break result",
            f"its input {i} is what break {name} returned, and the break returned the same "
            f"values in both runs: the replay gave the graph another tensor than the break's "
            f"result (the target did not refresh it). Input: {shown}",
        )
    if who == "op" and maker is not None:
        return (
            "divergence",
            f"its input {i} comes from {maker.name} at {_where(maker.site)} (a view or in-place "
            f"op that was not forced): {shown}",
        )
    return (
        "stale tensor",
        f"its input {i} is a tensor not made in this forward whose contents differ at replay: "
        f"a tensor held across steps, or written outside forward(). Input: {shown}",
    )


def compare_ops(
    eager: Trace,
    ops: list[OpRecord],
    replayed: dict[int, tuple[list[torch.Tensor], list[torch.Tensor]]],
    tol: Tolerance,
) -> Culprit | None:
    """The first of ``ops`` (eager records with copies) whose replayed output differs;
    ``replayed`` maps each op's position in ``ops`` to its replay-time inputs and outputs."""
    for position, op in enumerate(ops):
        seen = replayed.get(position)
        if seen is None or op.outputs is None or op.inputs is None:
            continue
        r_in, r_out = seen
        j = first_diff(op.outputs, r_out, tol)
        if j is None:
            continue
        shown = describe(
            op.outputs[j] if j < len(op.outputs) else None, r_out[j] if j < len(r_out) else None
        )
        i = first_diff(op.inputs, r_in, tol)
        if i is None:
            return Culprit(
                "divergence",
                op.name,
                op.site,
                "same tensor inputs at replay as eagerly, different output: it reads something "
                "its tensor arguments do not show (a host value frozen at capture, or memory "
                "outside its arguments)",
                f"output {j}: {shown}",
            )
        kind, reason = _explain_inputs(eager, op, op.inputs, r_in, i)
        return Culprit(kind, op.name, op.site, reason, f"output {j}: {shown}")
    return None


def in_break_body(eager: Trace, replay: Trace, brk: int, tol: Tolerance) -> Culprit | None:
    """The first op of break ``brk``'s body whose output differs between the runs."""
    mine, theirs = eager.body_ops(brk), replay.body_ops(brk)
    replayed = {
        i: (r.inputs or [], r.outputs or [])
        for i, (e, r) in enumerate(zip(mine, theirs))
        if (e.name, e.site) == (r.name, r.site)
    }
    found = compare_ops(eager, mine, replayed, tol)
    if found is not None and found.kind == "stale tensor":
        found = Culprit(
            "break state",
            found.op,
            found.site,
            "inside break "
            + eager.breaks[brk].name
            + f": {found.reason}; a break that keeps a tensor across steps must keep a copy "
            "(a replay hands it the same tensors every step)",
            found.tensor,
        )
    return found
