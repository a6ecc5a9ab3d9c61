"""What bisect sees of one forward: every op a user line dispatched, and every break call.

A :class:`Tracer` is a dispatch mode that records, for each op whose innermost caller outside
torch and the standard library is the user's code, its name, its call site, its
*signature* (non-tensor arguments, tensor metadata, and the values of host tensors: what a
capture bakes into a graph) and the device memory it reads from outside the forward. Ops
dispatched by the harness or the capture library are not the user's and are skipped. With
``detail`` it also keeps copies of the chosen ops' tensor inputs and outputs, and with
``force`` it runs the chosen ops as eager breaks of the target, so that their inputs and
outputs can be seen at replay. :class:`BreakLog` records the arguments and results of the
user's breaks; bisect wraps each break function so that eager runs and replays both report.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import breakable_cudagraph
import verification
from verification.causes import forwarder

Site = tuple[str, int]


def _package_dir(module: Any) -> str | None:
    path = getattr(module, "__file__", None)
    return os.path.dirname(os.path.abspath(path)) + os.sep if path else None


# Frames looked through on the way out to the user's line, and frames that make an op not
# the user's own (the harness or a capture library dispatching it). The simulator stands in
# for CUDA torch, whose ``Tensor.to``, ``cuda()`` and ``torch.tensor`` are C++: its Python
# shims for them must not hide the user's line from the ops they dispatch, as torch's own
# frames do not (they dispatch what CUDA torch dispatches: see ``verification.sim.cuda_api``).
_SIMULATOR = os.path.join(os.path.dirname(os.path.abspath(verification.__file__)), "sim") + os.sep
_TRANSPARENT = tuple(
    d
    for d in (
        _package_dir(torch),
        os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep,
        _SIMULATOR,
    )
    if d
)
_INTERNAL_BASE = tuple(
    d for d in (_package_dir(verification), _package_dir(breakable_cudagraph)) if d
)


def internal_dirs(target_module: Any) -> tuple[str, ...]:
    """The harness, this library and the target's own code: not the user's.

    Only the target module itself (its package when it is one, and the module an adapter
    names in ``MODULE``): a user's model may live in the same distribution as the target, as
    vLLM's models do beside ``vllm.compilation.breakable_cudagraph``."""
    extra: list[str] = []
    named = sys.modules.get(str(getattr(target_module, "MODULE", "") or ""))
    for module in (target_module, named):
        path = getattr(module, "__file__", None)
        if not path:
            continue
        if hasattr(module, "__path__"):
            extra.append(os.path.dirname(os.path.abspath(path)) + os.sep)
        else:
            extra.append(os.path.abspath(path))
    return _INTERNAL_BASE + tuple(e for e in extra if e not in _INTERNAL_BASE)


def user_site(frame: Any, internal: tuple[str, ...]) -> Site | None:
    """The innermost user line above ``frame``; None when the harness or a library called."""
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(_TRANSPARENT) or name.startswith("<"):
            frame = frame.f_back
            continue
        if name.startswith(internal):
            return None
        return (name, frame.f_lineno)
    return None


def caller_site(frame: Any, internal: tuple[str, ...]) -> Site | None:
    """The innermost user line above ``frame``, looking through the harness and the library
    too: where the user called a break, through whatever wraps it."""
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_TRANSPARENT + internal) and not name.startswith("<"):
            return (name, frame.f_lineno)
        frame = frame.f_back
    return None


def site_of_traceback(tb: Any, internal: tuple[str, ...]) -> Site | None:
    """The innermost user line in a traceback (where an error was raised in the user's code)."""
    found = None
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if not name.startswith(_TRANSPARENT + internal) and not name.startswith("<"):
            found = (name, tb.tb_lineno)
        tb = tb.tb_next
    return found


def storage_ptr(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except Exception:  # a tensor without storage (meta, sparse): nothing to track
        return 0


def _describe(x: Any) -> Any:
    """What a capture freezes of one argument: a host tensor's values, a device tensor's layout."""
    if isinstance(x, torch.Tensor):
        meta = (tuple(x.shape), tuple(x.stride()), x.storage_offset(), str(x.dtype))
        if x.device.type == "cpu" and x.numel() <= 64:
            return ("host tensor", meta, x.tolist())
        return ("tensor", meta)
    if isinstance(x, (list, tuple)):
        return type(x)(_describe(v) for v in x)
    return x


def signature(args: tuple, kwargs: dict) -> tuple[str, ...]:
    """One entry per argument (keywords as ``name=``): what a capture freezes of each."""
    return tuple(repr(_describe(a)) for a in args) + tuple(
        f"{k}={_describe(v)!r}" for k, v in kwargs.items()
    )


def host_values(args: tuple, kwargs: dict) -> str:
    """The non-tensor leaves of a call: what a replayed break receives as captured."""
    plain = (int, float, bool, str, bytes, type(None), torch.dtype, torch.device)
    return repr(
        [
            x if isinstance(x, plain) else type(x).__name__
            for x in tree_flatten((args, kwargs))[0]
            if not isinstance(x, torch.Tensor)
        ]
    )


def _is_view(func: Any) -> bool:
    returns = func._schema.returns
    return any(r.alias_info is not None and not r.alias_info.is_write for r in returns)


def _written(func: Any, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors an op writes in place (its ``Tensor(a!)`` arguments)."""
    written = []
    for i, spec in enumerate(func._schema.arguments):
        if spec.alias_info is None or not spec.alias_info.is_write:
            continue
        value = kwargs.get(spec.name) if spec.kwarg_only or i >= len(args) else args[i]
        written += tensors(value)
    return written


def _mutates(func: Any) -> bool:
    return any(a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments)


def tensors(tree: Any) -> list[torch.Tensor]:
    return [x for x in tree_flatten(tree)[0] if isinstance(x, torch.Tensor)]


def copies(tree: Any) -> list[torch.Tensor]:
    return [t.detach().clone() for t in tensors(tree)]


@dataclass(frozen=True)
class Layout:
    """A tensor argument as a reproducer needs it: its layout, and a host tensor's values."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    on_device: bool
    values: Any = None


def layouts(tree: Any) -> Any:
    """``tree`` with every tensor replaced by its :class:`Layout`."""
    from torch.utils._pytree import tree_map

    def one(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        host = x.device.type == "cpu"
        values = x.tolist() if host and x.numel() <= 64 else None
        return Layout(tuple(x.shape), tuple(x.stride()), x.dtype, not host, values)

    return tree_map(one, tree)


@dataclass
class OpRecord:
    """One op of a forward. ``segment`` counts the breaks before it; ``in_break`` is the
    break whose body ran it (None: a graph segment's op)."""

    index: int
    segment: int
    in_break: int | None
    name: str
    site: Site
    signature: tuple[str, ...]
    device: bool
    view: bool
    forceable: bool
    external: tuple[tuple[int, int], ...]  # (argument position, storage) read from outside
    input_ptrs: tuple[int, ...]
    output_ptrs: tuple[int, ...]
    inputs: list[torch.Tensor] | None = None
    outputs: list[torch.Tensor] | None = None
    func: Any = None
    call: Any = None  # (args, kwargs) with tensors as Layouts: a reproducer's material


@dataclass
class BreakRecord:
    """One call of a user's break: copies of its tensor arguments before and after, its
    non-tensor arguments, and its result."""

    index: int
    name: str
    site: Site | None
    host_args: str
    inputs: list[torch.Tensor]
    after: list[torch.Tensor] = field(default_factory=list)
    result: list[torch.Tensor] = field(default_factory=list)
    result_ptrs: tuple[int, ...] = ()
    input_ptrs: tuple[int, ...] = ()
    returned_at: Site | None = None  # the line of the break's body that returned

    @property
    def returned_an_argument(self) -> bool:
        """Whether a tensor it returned is (a view of) one of its tensor arguments."""
        return bool(set(self.result_ptrs) & set(self.input_ptrs) - {0})


@dataclass
class Trace:
    ops: list[OpRecord] = field(default_factory=list)
    breaks: list[BreakRecord] = field(default_factory=list)
    # Storage -> who wrote it last in this forward: ("op", index) or ("break", index).
    producers: dict[int, tuple[str, int]] = field(default_factory=dict)
    # The op being dispatched: still set when it raised.
    pending: OpRecord | None = None

    def graph_ops(self, segment: int) -> list[OpRecord]:
        return [op for op in self.ops if op.segment == segment and op.in_break is None]

    def body_ops(self, brk: int) -> list[OpRecord]:
        return [op for op in self.ops if op.in_break == brk]


Choose = Callable[[OpRecord], bool]


def _none(op: OpRecord) -> bool:
    return False


class Tracer(TorchDispatchMode):
    """Records the user's ops into ``trace``. ``detail(op)``: keep copies of its tensors;
    ``force(op)``: run it as an eager break made by ``decorate`` (the target's decorator)."""

    def __init__(
        self,
        internal: tuple[str, ...],
        detail: Choose = _none,
        force: Choose = _none,
        decorate: Callable[[Any], Any] | None = None,
    ) -> None:
        super().__init__()
        self.internal = internal
        self.detail = detail
        self.force = force
        self.decorate = decorate
        self.trace = Trace()
        self.segment = 0
        self.in_break: int | None = None
        self.forced: dict[int, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
        # Forced op -> the storages it was handed (at capture, then at the last replay).
        self.forced_ptrs: dict[int, list[tuple[int, ...]]] = {}
        self._recording_forced = False

    def start(self, record_forced: bool) -> Trace:
        """A new forward: a fresh trace; ``record_forced``: forced breaks keep their tensors."""
        self.trace = Trace()
        self.segment = 0
        self.in_break = None
        self.forced = {}
        self._recording_forced = record_forced
        return self.trace

    @forwarder  # an op that raises is the caller's, not the tracer's
    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        site = user_site(sys._getframe(1), self.internal)
        if site is None:
            return func(*args, **kwargs)
        leaves = tensors((args, kwargs))
        produced = self.trace.producers
        view = _is_view(func)
        op = OpRecord(
            index=len(self.trace.ops),
            segment=self.segment,
            in_break=self.in_break,
            name=str(func),
            site=site,
            signature=signature(args, kwargs),
            device=any(t.device.type != "cpu" for t in leaves),
            view=view,
            forceable=not view and not _mutates(func) and self.in_break is None,
            external=tuple(
                (i, storage_ptr(t))
                for i, t in enumerate(leaves)
                if t.device.type != "cpu" and storage_ptr(t) not in produced
            ),
            input_ptrs=tuple(storage_ptr(t) for t in leaves),
            output_ptrs=(),
            func=func,
        )
        if self.in_break is None:
            op.call = layouts((args, kwargs))
        keep = self.detail(op)
        if keep:
            op.inputs = copies((args, kwargs))
        self.trace.pending = op
        if self.force(op) and self.decorate is not None:
            result = self.decorate(self._forced_call(op.index, func))(*args, **kwargs)
        else:
            result = func(*args, **kwargs)
        self.trace.pending = None
        outs = tensors(result)
        op.output_ptrs = tuple(storage_ptr(t) for t in outs)
        if not view:
            for p in op.output_ptrs:
                produced[p] = ("op", op.index)
            for t in _written(func, args, kwargs):
                produced.setdefault(storage_ptr(t), ("op", op.index))
        if keep:
            op.outputs = [t.detach().clone() for t in outs]
        self.trace.ops.append(op)
        return result

    def _forced_call(self, index: int, func: Any) -> Callable[..., Any]:
        @forwarder
        def forced_op(*args: Any, **kwargs: Any) -> Any:
            seen = self.forced_ptrs.setdefault(index, [])
            seen[1:] = [tuple(storage_ptr(t) for t in tensors((args, kwargs)))]
            result = func(*args, **kwargs)
            if self._recording_forced:
                self.forced[index] = (copies((args, kwargs)), copies(result))
            return result

        return forced_op
