"""Loads the user's ``MODULE:FN`` with its breaks routed through bisect, and runs the model.

The user's module is imported (again, if it was already) while the capture library's break
decorator, and the target's, are replaced by one that wraps each break function before
handing it to the target's decorator: every call of it, eager or replayed, then reports to
the active :class:`Session`. A model written against this library's names therefore runs
under any target with vLLM's names. ``FN()`` must return ``(forward, next_step)``;
anything else is a :class:`~verification.errors.UsageError`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

import breakable_cudagraph
from verification.bisect.trace import (
    BreakRecord,
    Site,
    Tracer,
    caller_site,
    copies,
    host_values,
    storage_ptr,
    tensors,
)
from verification.causes import forwarder
from verification.errors import UsageError
from verification.targets import Target


class Session:
    """Where a wrapped break reports: the tracer of the running forward, and whether the
    break's tensors are kept (an eager run or a replay) or not (the capture)."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer
        self.keep = False

    @forwarder  # a break that raises is the user's, not the harness's
    def call_break(self, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        tracer = self.tracer
        if tracer.in_break is not None:  # a break inside a break is a plain call
            return fn(*args, **kwargs)
        trace = tracer.trace
        index = len(trace.breaks)
        record = BreakRecord(
            index=index,
            name=getattr(fn, "__qualname__", repr(fn)),
            site=caller_site(sys._getframe(1), tracer.internal),
            host_args=host_values(args, kwargs),
            inputs=copies((args, kwargs)) if self.keep else [],
            input_ptrs=tuple(storage_ptr(t) for t in tensors((args, kwargs))),
        )
        trace.breaks.append(record)
        tracer.in_break = index
        try:
            result, record.returned_at = _returning(fn, args, kwargs)
        finally:
            tracer.in_break = None
            tracer.segment = index + 1
        if self.keep:
            record.after = copies((args, kwargs))
            record.result = copies(result)
        record.result_ptrs = tuple(storage_ptr(t) for t in tensors(result))
        for p in record.result_ptrs:
            trace.producers[p] = ("break", index)
        return result


@forwarder
def _returning(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[Any, Site | None]:
    """``fn(*args, **kwargs)`` and the line of ``fn``'s body that returned: a target that
    refuses what a break returned is answered with that line. None when another profiler is
    set (it is left alone) or ``fn`` is no Python function."""
    code = getattr(fn, "__code__", None)
    if code is None or sys.getprofile() is not None:
        return fn(*args, **kwargs), None
    returned: list[Site] = []

    def watch(frame: Any, event: str, arg: Any) -> None:
        if event == "return" and frame.f_code is code:
            returned.append((code.co_filename, frame.f_lineno))

    sys.setprofile(watch)
    try:
        result = fn(*args, **kwargs)
    finally:
        sys.setprofile(None)
    return result, returned[-1] if returned else None


_session: Session | None = None


@contextlib.contextmanager
def session(tracer: Tracer) -> Iterator[Session]:
    global _session
    previous, _session = _session, Session(tracer)
    try:
        yield _session
    finally:
        _session = previous


def _reporting(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    @forwarder
    def reported(*args: Any, **kwargs: Any) -> Any:
        if _session is None:
            return fn(*args, **kwargs)
        return _session.call_break(fn, args, kwargs)

    return reported


def _routing_decorator(target: Target) -> Callable[..., Any]:
    original = target.eager_break_during_capture

    def eager_break_during_capture(fn: Any = None, *, enable: bool = True, **kw: Any) -> Any:
        if fn is None:
            return functools.partial(eager_break_during_capture, enable=enable, **kw)
        if not enable:
            return fn
        return original(_reporting(fn), **kw)

    return eager_break_during_capture


@dataclass(frozen=True)
class UserModel:
    """``MODULE:FN`` loaded: ``build()`` calls FN and returns ``(forward, next_step)``."""

    ref: str
    fn: Callable[[], Any]
    target: Target

    def build(self, seed: int) -> tuple[Callable[[], Any], Callable[[int], None]]:
        torch.manual_seed(seed)
        try:
            with routed_breaks(self.target):  # breaks FN decorates as it builds report too
                built = self.fn()
        except UsageError:
            raise
        except Exception as error:
            raise UsageError(
                f"{self.ref}() raised {type(error).__name__}: {' '.join(str(error).split())}"
            ) from None
        if not isinstance(built, tuple) or len(built) != 2 or not all(callable(x) for x in built):
            raise UsageError(
                f"{self.ref}() returned {type(built).__name__}; it must return "
                "(forward, next_step): forward() runs one step, next_step(step) prepares inputs"
            )
        return built


@contextlib.contextmanager
def routed_breaks(target: Target) -> Iterator[None]:
    """This library's break decorator, and the target's, wrap break functions for bisect."""
    from breakable_cudagraph import breaks

    decorators = [
        (breakable_cudagraph, breakable_cudagraph.eager_break_during_capture),
        (breaks, breaks.eager_break_during_capture),
    ]
    if target.module is not breakable_cudagraph:
        decorators.append((target.module, target.eager_break_during_capture))
    routed = _routing_decorator(target)
    for holder, _ in decorators:
        holder.eager_break_during_capture = routed
    try:
        yield
    finally:
        for holder, original in decorators:
            holder.eager_break_during_capture = original


def load_user_model(ref: str, target: Target) -> UserModel:
    """Imports ``MODULE`` with breaks routed (see the module docstring) and finds ``FN``."""
    module_name, sep, fn_name = ref.partition(":")
    if not sep or not module_name or not fn_name.isidentifier():
        raise UsageError(f"{ref!r} is not MODULE:FN (an importable module and a function in it)")
    sys.modules.pop(module_name, None)
    try:
        with routed_breaks(target):
            module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise UsageError(f"cannot import {module_name!r}: {error}") from None
    except Exception as error:
        raise UsageError(
            f"importing {module_name!r} raised {type(error).__name__}: "
            f"{' '.join(str(error).split())}"
        ) from None
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise UsageError(f"{module_name!r} has no function {fn_name!r}")
    return UserModel(ref=ref, fn=fn, target=target)
