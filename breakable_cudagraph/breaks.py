"""``eager_break_during_capture``: marks a function that must run eagerly inside a capture.

Outside a capture the decorated function is a plain call. Inside one it becomes an eager break
(``BreakableCUDAGraphCapture.add_eager_call``) whose arguments are held safely for replay. A
decorated call made from inside an eager step runs inline, so breaks never nest.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, overload

from .thread_state import break_target

F = TypeVar("F", bound=Callable[..., Any])


@overload
def eager_break_during_capture(fn: F, *, enable: bool = True) -> F: ...


@overload
def eager_break_during_capture(fn: None = None, *, enable: bool = True) -> Callable[[F], F]: ...


def eager_break_during_capture(fn: F | None = None, *, enable: bool = True) -> Any:
    """Run ``fn`` eagerly between CUDA graph segments when called during a breakable capture.

    Use bare (``@eager_break_during_capture``) or with arguments
    (``@eager_break_during_capture(enable=flag)``); ``enable=False`` returns ``fn`` unchanged.

    What runs when:
      * No capture open in this thread (or graphs disabled): a plain call.
      * Capture open: the current graph segment ends, ``fn(*args, **kwargs)`` runs once eagerly
        on the capture stream, the call is recorded, and the next segment begins. Every
        ``replay()`` runs it again exactly once, in order, with the same arguments.
      * Called from inside an eager step (at capture or replay): a plain call, no second break.

    Arguments: tensors anywhere in ``args``/``kwargs`` (inside tuples, lists, dicts, namedtuples,
    dataclasses) are seen at replay at the same addresses, even if the caller drops every
    reference. Tensors created inside the capture (in its memory pool) are held by non-owning
    aliases, so they die when the caller drops them while their memory stays reserved for the
    graphs; all other tensors, and any other object, are kept by strong reference. At replay the
    function reads whatever the preceding graph segments wrote into those tensors; tensors inside
    other objects (e.g. a module's parameters) are read through that object.

    Returns: the capture-time return value is returned to the caller. Tensors in it are kept;
    at each replay the new return value's tensors are copied into them, so later segments see
    fresh data (a different shape, dtype or tensor count at replay raises ``RuntimeError``).
    Non-tensor return values are fixed at capture. With ``strict=True`` on the capture, returning
    a tensor raises ``TypeError`` at capture. Exceptions from ``fn`` propagate and abort the
    capture. A non-callable ``fn`` raises ``TypeError``.
    """
    if fn is None:
        return functools.partial(eager_break_during_capture, enable=enable)
    if not callable(fn):
        raise TypeError(f"eager_break_during_capture decorates a callable, got {type(fn).__name__}")
    if not enable:
        return fn

    @functools.wraps(fn)
    def eager_break(*args: Any, **kwargs: Any) -> Any:
        capture = break_target()
        if capture is None:
            return fn(*args, **kwargs)
        return capture._decorated_break(fn, args, kwargs)

    return eager_break
