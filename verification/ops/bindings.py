"""How the callable a break decorates is defined and bound: a plain function, a method of a
module (as every attention layer's forward is), a static or class method, a partial, or an
object with ``__call__``.

:data:`BINDINGS` names each way; :data:`BINDING_SOURCE` is standalone Python text, run by the
executor and printed in reproducers, whose ``bound_as(way, decorator, fn)`` applies the
target's decorator to ``fn`` defined that way and returns what a model calls. Each way hands
``fn`` the same arguments, so a program computes the same under every binding: a target whose
decorator loses ``self``, calls the wrong object at replay, or cannot wrap a callable that is
not a function shows as a mismatch or a crash at the step.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

# Each way, and what crosses the decorator that a plain function does not bring.
BINDINGS: dict[str, str] = {
    "method": "a method of a torch.nn.Module, called through the instance (self crosses)",
    "static": "a staticmethod of a class, called through an instance",
    "classmethod": "a classmethod, called through an instance (the class crosses)",
    "partial": "a functools.partial binding a positional and a keyword argument (no __name__)",
    "object": "an object whose class defines __call__",
}

BINDING_SOURCE = '''
def bound_as(way, decorator, fn):
    """decorator applied to fn defined the way named; what the model then calls. Each
    definition keeps fn's name, as a model's method or kernel object is named for its work."""
    name = getattr(fn, "__name__", "kernel")
    if way == "method":

        def method(self, *args, **kwargs):
            return fn(*args, **kwargs)

        method.__name__ = method.__qualname__ = name
        layer = type("Layer", (torch.nn.Module,), {name: decorator(method)})()
        return getattr(layer, name)
    if way == "static":
        return getattr(type("Ops", (), {name: staticmethod(decorator(fn))})(), name)
    if way == "classmethod":

        def method(cls, *args, **kwargs):
            return fn(*args, **kwargs)

        method.__name__ = method.__qualname__ = name
        return getattr(type("Ops", (), {name: classmethod(decorator(method))})(), name)
    if way == "partial":

        def specialised(layer, *args, layer_scale, **kwargs):
            if (layer, layer_scale) != ("layer 0", 1.0):  # what the partial bound, intact
                raise TypeError(f"the partial's bound arguments arrived as {layer!r}, {layer_scale!r}")
            return fn(*args, **kwargs)

        specialised.__name__ = specialised.__qualname__ = name
        return decorator(functools.partial(specialised, "layer 0", layer_scale=1.0))
    if way == "object":
        kernel = type(name, (), {"__call__": lambda self, *args, **kwargs: fn(*args, **kwargs)})
        return decorator(kernel())
    return decorator(fn)
'''


@functools.cache
def _bound_as() -> Any:
    namespace: dict[str, Any] = {"torch": torch, "functools": functools}
    exec(compile(BINDING_SOURCE, "<bindings>", "exec"), namespace)
    return namespace["bound_as"]


def bound_as(way: str, decorator: Any, fn: Any) -> Any:
    """``decorator`` applied to ``fn`` defined as :data:`BINDINGS` names ``way`` ("" for a
    plain function): what the program calls."""
    return _bound_as()(way, decorator, fn)
