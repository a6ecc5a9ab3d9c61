"""Where a replay first parts from the eager run of the same inputs, and the causes of what a
replay did otherwise, as values.

A :class:`Recorder`, set on a break log, keeps what each break call received (its tensors'
values, its host values and containers with their types, and whether each is the caller's own
object) and what it returned and wrote. :func:`first_parting` walks an eager record and a
replay's in order and names the first break whose arguments or result differ, else the first
graph segment whose output does, in words and as a :class:`~verification.causes.Cause`. The
tensor comparisons are bisect's (:func:`differs`, :func:`describe`), kept here, below both.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from verification.causes import Cause


def differs(a: torch.Tensor, b: torch.Tensor, rtol: float = 0.0, atol: float = 0.0) -> bool:
    """Whether two tensors differ in layout, or in values beyond the tolerance (NaN == NaN)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return True
    a, b = a.detach().cpu(), b.detach().cpu()
    if a.is_floating_point() or a.is_complex():
        if a.dtype.is_floating_point and a.element_size() == 1:
            a, b = a.float(), b.float()
        return not torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    return not torch.equal(a, b)


def _layout(t: torch.Tensor) -> str:
    return f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')}"


def describe(
    t: torch.Tensor | None,
    other: torch.Tensor | None = None,
    rtol: float = 0.0,
    atol: float = 0.0,
) -> str:
    """A tensor and, given the other run's, where they first differ beyond the tolerance."""
    if t is None:
        return "missing"
    text = _layout(t)
    if other is None:
        return text
    if other.shape != t.shape or other.dtype != t.dtype:
        return f"eager {text}, replay {_layout(other)}"
    a = torch.view_as_real(t).detach().cpu() if t.is_complex() else t.detach().cpu()
    b = torch.view_as_real(other).detach().cpu() if other.is_complex() else other.detach().cpu()
    a, b = a.double().reshape(-1), b.double().reshape(-1)
    bad = ~torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    if bad.any():
        i = int(bad.nonzero()[0])
        text += f", first at flat index {i}: eager {a[i].item():.6g}, replay {b[i].item():.6g}"
        text += f" ({int(bad.sum())} of {a.numel()} elements differ)"
    return text


# --- causes of what a replay did otherwise --------------------------------------------------


def _generic(label: str) -> str:
    """A type label without the program's own names and counts: what breaks is being a
    namedtuple, or a dict's keys or a call's keywords or its number of arguments changing,
    whichever the program named or how many it passed; and a tensor, whatever view bits or
    attributes it had (those are :data:`TENSOR_REBUILT`'s to name)."""
    if _tensor_label(label):
        return "Tensor"
    label = re.sub(r"namedtuple \w+", "namedtuple", label)
    label = re.sub(r"\[[^\]]*\]", "", label)  # a dict's keys, a call's keyword names
    return re.sub(r" of \d+$", "", label).strip()


# A tensor the target rebuilt for replay over the same memory: its view bits, its subclass or
# its Python attributes are lost, whichever of them the program's tensor had.
TENSOR_REBUILT = Cause(
    "handed-otherwise", "a tensor rebuilt at replay without its view bits, type or attributes"
)


def _tensor_label(label: str) -> bool:
    return label.split(" ")[0].endswith("Tensor") or label.startswith("Tensor")


def handed_cause(given: str, got: str, owned_suffix: str) -> Cause:
    """The cause of a break handed ``got`` at replay where it was given ``given``: the copy of
    the caller's own object (``given`` is ``got`` labelled with ``owned_suffix``) made at
    capture, a tensor rebuilt without what made it more than a plain tensor, or another
    type."""
    if given == got + owned_suffix:
        return Cause("capture-time-copy", f"a {_generic(got)} host argument")
    if _tensor_label(given) and _tensor_label(got):
        return TENSOR_REBUILT
    if _generic(given) == _generic(got):  # the same kind of thing with other keys or items
        return Cause("handed-otherwise", f"{_generic(given)} handed at replay with other items")
    return Cause("handed-otherwise", f"{_generic(given)} handed at replay as {_generic(got)}")


def layout_cause(aspects: Sequence[str]) -> Cause:
    """The cause of a tensor handed to a break at replay in another layout than at capture,
    by the most telling aspect that differs (``dtype``, ``shape``, ``strides``, ``address``):
    one bug hands a column of the wrong strides and the copy it made at another address."""
    return Cause(
        "handed-otherwise", f"a tensor handed to a break at replay with another {aspects[0]}"
    )


def calls_cause(called: Sequence[int], expected: Sequence[int]) -> Cause:
    """What a replay did to the breaks, from the steps it called and those it should have."""
    more = any(called.count(s) > expected.count(s) for s in set(called))
    fewer = any(called.count(s) < expected.count(s) for s in set(expected))
    if more and fewer:
        words = "a replay ran other breaks in place of those the capture recorded"
    elif more:
        words = "a replay ran a break more often than the capture recorded it"
    elif fewer:
        words = "a replay left out a break the capture recorded"
    else:
        words = "a replay ran the breaks in another order than the capture recorded"
    return Cause("calls", words)


AMBIENT = Cause("ambient")
# A replay that ran breaks another capture object recorded: state shared between captures.
FOREIGN_CALLS = Cause("calls", "a replay ran breaks that another capture recorded")


# --- what each break call received and returned ---------------------------------------------


@dataclass
class Leaf:
    """One argument as a break received it: a tensor (its values), or a host value or a
    container of host values (its value, its type, and whether it is the caller's own)."""

    name: str
    tensor: torch.Tensor | None
    value: Any = None
    label: str = ""
    owned: bool = False


@dataclass
class CallRecord:
    """One break call: its step, its function's name, what it received, and what it wrote
    (its tensor arguments after the call) and returned."""

    step: int
    op: str
    received: list[Leaf]
    after: list[Leaf] = field(default_factory=list)
    result: list[Leaf] = field(default_factory=list)


def _has_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(_has_tensor(v) for v in value.values())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return any(_has_tensor(getattr(value, f.name)) for f in dataclasses.fields(value))
    return False


def _plain(value: Any) -> Any:
    """A host value as it was then (a copy of a container of host values)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value if isinstance(value, (int, float, bool, str, type(None))) else type(value)


def leaves(value: Any, name: str, owned: frozenset[int]) -> list[Leaf]:
    """``value``'s tensors and host values, each named by its path from ``name``."""
    mine = id(value) in owned
    if isinstance(value, torch.Tensor):
        return [Leaf(name, value.detach().clone(), label=type(value).__name__, owned=mine)]
    label = type(value).__name__
    if not _has_tensor(value) and not (
        dataclasses.is_dataclass(value) and not isinstance(value, type)
    ):
        return [Leaf(name, None, _plain(value), label, mine)]
    found = [Leaf(name, None, None, label, mine)]  # the container itself: its type and owner
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found += leaves(v, f"{name}[{i}]", owned)
    elif isinstance(value, dict):
        for k, v in value.items():
            found += leaves(v, f"{name}[{k!r}]", owned)
    else:
        for f in dataclasses.fields(value):
            found += leaves(getattr(value, f.name), f"{name}.{f.name}", owned)
    return found


def _named(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> list:
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
        return list(bound.arguments.items())
    except (TypeError, ValueError):
        return [(f"argument {i}", a) for i, a in enumerate(args)] + list(kwargs.items())


class Recorder:
    """Set on a :class:`~verification.execute.BreakLog` (``recorder``): keeps a
    :class:`CallRecord` of every break call, in order. ``owned`` holds the ids of the objects
    the caller keeps and updates in place (an engine runner's host values)."""

    def __init__(self, owned: frozenset[int] = frozenset()) -> None:
        self.owned = owned
        self.calls: list[CallRecord] = []

    def before(
        self, step: int, fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> CallRecord:
        received: list[Leaf] = []
        for name, value in _named(fn, args, kwargs):
            received += leaves(value, name, self.owned)
        record = CallRecord(step, getattr(fn, "__name__", "break"), received)
        self.calls.append(record)
        return record

    def after(
        self, record: CallRecord, args: Sequence[Any], kwargs: Mapping[str, Any], result: Any
    ) -> None:
        after: list[Leaf] = []
        for name, value in _named(lambda *a, **k: None, args, kwargs):
            after += leaves(value, name, frozenset())
        record.after = [leaf for leaf in after if leaf.tensor is not None]
        record.result = [
            leaf for leaf in leaves(result, "result", frozenset()) if leaf.tensor is not None
        ]
        # The names of what was received, which `after` takes positionally.
        for mine, theirs in zip(record.after, [x for x in record.received if x.tensor is not None]):
            mine.name = theirs.name


# --- where two runs part --------------------------------------------------------------------


@dataclass(frozen=True)
class Parting:
    """The first place a replay parts from eager, in words (``words``) and as a cause."""

    words: str
    cause: Cause


def _show(value: Any) -> str:
    return repr(value) if not isinstance(value, type) else f"a {value.__name__}"


def _host_parting(
    call: CallRecord, eager: Leaf, replay: Leaf, at_capture: Leaf | None
) -> Parting | None:
    where = f"break `{call.op}` at step {call.step}"
    if eager.label != replay.label:
        return Parting(
            f"{where} received `{replay.name}` as a {replay.label} at replay where eager passed "
            f"a {eager.label}",
            Cause("handed-otherwise", f"{eager.label} handed at replay as {replay.label}"),
        )
    if eager.value == replay.value or eager.value is None:
        return None
    words = (
        f"{where} received `{replay.name}` {_show(replay.value)} at replay where eager passed "
        f"{_show(eager.value)}"
    )
    as_at_capture = at_capture is not None and at_capture.value == replay.value
    if as_at_capture and not replay.owned:
        kind = eager.label
        return Parting(
            f"{words}: the {kind} it got is the one given at capture, not the caller's {kind}",
            Cause("capture-time-copy", f"a {_generic(kind)} host argument"),
        )
    if as_at_capture:
        return Parting(
            f"{words}: it got the value given at capture", Cause("values", "a break's host value")
        )
    return Parting(words, Cause("values", "a break's host value"))


def first_parting(
    eager: Sequence[CallRecord],
    replay: Sequence[CallRecord],
    at_capture: Sequence[CallRecord],
    outputs: Sequence[tuple[int, str, str]],
    rtol: float = 0.0,
    atol: float = 0.0,
) -> Parting | None:
    """The first break whose arguments or result differ between ``eager`` and ``replay`` (the
    calls of one step's eager run and replay, in order; ``at_capture`` an eager run on the
    capture's host values, to tell a value frozen at capture), else the first of ``outputs``
    (``(output index, the graph segment that computed it, how it differs)``); None when the
    records are out of step (the break count or order names that) and no output differs."""
    if [c.step for c in eager] != [c.step for c in replay]:
        return None
    for number, (e, r) in enumerate(zip(eager, replay)):
        captured = at_capture[number] if number < len(at_capture) else None
        given = {leaf.name: leaf for leaf in captured.received} if captured else {}
        theirs = {leaf.name: leaf for leaf in r.received}
        where = f"break `{e.op}` at step {e.step}"
        for mine in e.received:  # host values and containers first: they say the most
            other = theirs.get(mine.name)
            if other is None or mine.tensor is not None:
                continue
            found = _host_parting(e, mine, other, given.get(mine.name))
            if found is not None:
                return found
        written = {a.name for a in e.after if _written(a, e.received)}
        for mine in e.received:
            other = theirs.get(mine.name)
            if mine.tensor is None or other is None or other.tensor is None:
                continue
            if mine.name not in written and differs(mine.tensor, other.tensor, rtol, atol):
                return Parting(
                    f"{where} received `{mine.name}` with other values at replay than eager "
                    f"({describe(mine.tensor, other.tensor)}): the graph segment before it "
                    "computed them otherwise",
                    Cause("values", "a graph segment before a break"),
                )
        for what, mine_list, their_list in (
            ("wrote into", e.after, r.after),
            ("returned", e.result, r.result),
        ):
            for mine, other in zip(mine_list, their_list):
                if differs(mine.tensor, other.tensor, rtol, atol):  # type: ignore[arg-type]
                    return Parting(
                        f"{where} received the same arguments as eager but {what} "
                        f"`{mine.name}` otherwise at replay "
                        f"({describe(mine.tensor, other.tensor)}): the break's own call at "
                        "replay differs from eager",
                        Cause("values", "a break's own call at replay"),
                    )
    for index, segment, problem in outputs:
        return Parting(
            f"{segment} computed output {index} otherwise at replay than eager ({problem}); "
            "no break's arguments or result differ",
            Cause("values", "a graph segment"),
        )
    return None


def _written(after: Leaf, received: Sequence[Leaf]) -> bool:
    """Whether the break changed the tensor argument ``after`` names (eagerly)."""
    before = next((x for x in received if x.name == after.name), None)
    return before is not None and before.tensor is not None and differs(before.tensor, after.tensor)  # type: ignore[arg-type]


def segment_of(value: int, producers: Mapping[int, int], break_steps: Sequence[int]) -> str:
    """The graph segment that computed ``value``: named by the breaks around the step that
    produced it (``producers``: value -> step; a program input is no segment's)."""
    step = producers.get(value)
    if step is None:
        return "no graph segment (a program input)"
    before = [b for b in break_steps if b < step]
    after = [b for b in break_steps if b > step]
    if step in break_steps:
        return f"break step {step}'s result"
    if not before and not after:
        return "the graph (no break)"
    if not before:
        return f"the graph segment before the first break (step {after[0]})"
    if not after:
        return f"the graph segment after the last break (step {before[-1]})"
    return f"the graph segment between break steps {before[-1]} and {after[0]}"
