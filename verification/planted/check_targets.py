"""Copies of the library with bugs only the property checks can see: faults at the CUDA calls
a capture makes once, containers that lose their type at replay, and several bugs in one
check's territory.

:func:`build` loads a private copy of ``breakable_cudagraph`` (as
:mod:`verification.planted.property_targets` does) and plants every bug a variant of :data:`VARIANTS`
names, so each is found by the check it names and the rest is the library's own behaviour.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any

import torch

from verification.planted.property_targets import _copy, _edited, library_target


def _pool_handle_taken_in_enter(lib: ModuleType) -> None:
    # The pool handle is taken in __enter__, after the capture is made the thread's active
    # one: a failing handle leaves it active.
    cls = lib.BreakableCUDAGraphCapture
    init, enter = cls.__init__, cls.__enter__

    def __init__(self: Any, pool: Any = None, **options: Any) -> None:
        init(self, pool if pool is not None else "later", **options)
        if pool is None:
            self.pool = None

    def __enter__(self: Any) -> Any:
        if self.pool is None:
            lib.thread_state.set_active_capture(self)
            self.pool = torch.cuda.graph_pool_handle()
            self._pool_memory = lib.arguments.PoolMemory(self.pool)
            lib.thread_state.set_active_capture(None)
        return enter(self)

    cls.__init__ = __init__
    cls.__enter__ = __enter__


def _rebuild(lib: ModuleType, is_kind: Callable[[Any], bool], rebuild: Callable[..., Any]) -> None:
    trees = lib.trees
    trees._CONTAINERS = tuple(
        (test, children, rebuild) if test is is_kind else (test, children, old)
        for test, children, old in trees._CONTAINERS
    )


def _namedtuple_rebuilt_plain(lib: ModuleType) -> None:
    _rebuild(lib, lib.trees._is_namedtuple, lambda tree, items: tuple(items))


def _dataclass_rebuilt_as_dict(lib: ModuleType) -> None:
    _rebuild(
        lib,
        lib.trees._is_dataclass_instance,
        lambda tree, items: dict(zip([f.name for f in dataclasses.fields(tree)], items)),
    )


def _list_rebuilt_as_tuple(lib: ModuleType) -> None:
    children, _ = lib.trees._EXACT[list]
    lib.trees._EXACT[list] = (children, lambda tree, items: tuple(items))


def _tuples_rebuilt_as_lists(lib: ModuleType) -> None:
    children, _ = lib.trees._EXACT[tuple]
    lib.trees._EXACT[tuple] = (children, lambda tree, items: list(items))


_DICT_SUBCLASS_PLAIN = _edited(
    "trees", "    if type(tree) is dict:\n", "    if isinstance(tree, dict):\n"
)

# name -> (what it plants, the check that must find it, how many findings, its plants)
VARIANTS: dict[str, tuple[str, str, int, tuple[Callable[[ModuleType], None], ...]]] = {
    "first_capture_begin_leaks": (
        "a failing first capture_begin, in __enter__, leaves the capture active and the "
        "stream switched (no abort)",
        "faults",
        1,
        (
            _edited(
                "capture",
                "            try:\n                self._begin_graph()\n"
                "            except BaseException as exc:\n                self._abort(exc)\n"
                "                raise\n",
                "            self._begin_graph()\n",
            ),
        ),
    ),
    "pool_handle_leaks": (
        "a failing pool handle, taken in __enter__, leaves the capture active",
        "faults",
        1,
        (_pool_handle_taken_in_enter,),
    ),
    "namedtuple_rebuilt_plain": (
        "a namedtuple argument is rebuilt as a plain tuple for replay",
        "pool",
        1,
        (_namedtuple_rebuilt_plain,),
    ),
    "dataclass_rebuilt_as_dict": (
        "a dataclass argument is rebuilt as a dict for replay",
        "pool",
        1,
        (_dataclass_rebuilt_as_dict,),
    ),
    "dict_subclass_rebuilt_plain": (
        "a dict subclass argument (ModelOutput-like) is rebuilt as a plain dict for replay",
        "pool",
        1,
        (_DICT_SUBCLASS_PLAIN,),
    ),
    "list_rebuilt_as_tuple": (
        "a list argument is rebuilt as a tuple for replay",
        "pool",
        1,
        (_list_rebuilt_as_tuple,),
    ),
    "tuples_rebuilt_as_lists": (
        "tuples in an argument (nested ones too) are rebuilt as lists for replay",
        "pool",
        1,
        (_tuples_rebuilt_as_lists,),
    ),
    "three_container_bugs": (
        "namedtuples, dataclasses and lists all lose their type at replay: three bugs",
        "pool",
        3,
        (_namedtuple_rebuilt_plain, _dataclass_rebuilt_as_dict, _list_rebuilt_as_tuple),
    ),
}


_BUILT = itertools.count()


def build(variant: str | None = None) -> SimpleNamespace:
    """The library copy with ``variant``'s bugs planted (``None``: an unmodified copy)."""
    if variant is not None and variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    # A fresh copy each time: a planted leak leaves the copy's thread state unusable for
    # whatever else uses it in this process.
    lib = _copy(f"check_{variant or 'clean'}_{next(_BUILT)}")
    for plant in VARIANTS[variant][3] if variant is not None else ():
        plant(lib)
    return library_target(lib, "check", "check_targets", variant)
