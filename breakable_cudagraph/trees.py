"""Walks nested argument structures to find and replace the tensors inside them.

Containers recognised: tuples, lists, dicts (and their subclasses), namedtuples and dataclass
instances; anything else is a leaf. ``map_tensors`` rebuilds only the containers whose tensors
change (others are returned as themselves), ``tensor_leaves`` lists the tensors in a fixed
order, ``children`` exposes one level.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import torch


def _is_namedtuple(tree: Any) -> bool:
    return isinstance(tree, tuple) and hasattr(type(tree), "_fields")


def _is_dataclass_instance(tree: Any) -> bool:
    return dataclasses.is_dataclass(tree) and not isinstance(tree, type)


def _rebuild_sequence(tree: Any, items: list[Any]) -> Any:
    return type(tree)(items)


def _rebuild_dict(tree: Any, items: list[Any]) -> Any:
    if type(tree) is dict:
        return dict(zip(tree.keys(), items))
    # A copy keeps subclass state such as a defaultdict's factory.
    rebuilt = copy.copy(tree)
    for key, item in zip(tree.keys(), items):
        rebuilt[key] = item
    return rebuilt


def _rebuild_dataclass(tree: Any, items: list[Any]) -> Any:
    # copy + object.__setattr__ works for frozen and slotted dataclasses and skips __init__.
    rebuilt = copy.copy(tree)
    for field, item in zip(dataclasses.fields(tree), items):
        object.__setattr__(rebuilt, field.name, item)
    return rebuilt


# (is this container?, its children in order, rebuild it from new children); first match wins,
# so namedtuples are tested before plain tuples.
_CONTAINERS: tuple[
    tuple[Callable[[Any], bool], Callable[[Any], list[Any]], Callable[[Any, list[Any]], Any]], ...
] = (
    (_is_namedtuple, list, lambda tree, items: type(tree)(*items)),
    (lambda tree: isinstance(tree, (tuple, list)), list, _rebuild_sequence),
    (lambda tree: isinstance(tree, dict), lambda tree: list(tree.values()), _rebuild_dict),
    (
        _is_dataclass_instance,
        lambda tree: [getattr(tree, f.name) for f in dataclasses.fields(tree)],
        _rebuild_dataclass,
    ),
)


_Kind = tuple[Callable[[Any], list[Any]], Callable[[Any, list[Any]], Any]]

# Exact builtin types answered by one lookup: every break's arguments are walked at capture,
# and the predicate chain costs more than the rest of holding them. Subclasses
# (namedtuples, defaultdicts) still go through _CONTAINERS.
_EXACT: dict[type, _Kind | None] = {
    tuple: (list, _rebuild_sequence),
    list: (list, _rebuild_sequence),
    dict: (lambda tree: list(tree.values()), _rebuild_dict),
    **{atom: None for atom in (type(None), bool, int, float, str, bytes)},
}


def _kind(tree: Any) -> _Kind | None:
    kind = _EXACT.get(type(tree), False)
    if kind is not False:
        return kind
    for is_container, list_children, rebuild in _CONTAINERS:
        if is_container(tree):
            return list_children, rebuild
    return None


def children(tree: Any) -> list[Any] | None:
    """The direct children of a recognised container, or None for a leaf."""
    kind = _kind(tree)
    return None if kind is None else kind[0](tree)


def map_tensors(
    tree: Any,
    fn: Callable[[torch.Tensor], Any],
    copied: Callable[[Any, Any], Any] | None = None,
) -> Any:
    """A copy of ``tree`` with each tensor ``t`` replaced by ``fn(t)``; leaves are shared.
    ``copied(container, its copy)``, if given, says what stands for a container that had to be
    copied (the copy itself by default)."""
    return map_leaves(tree, fn, lambda leaf: isinstance(leaf, torch.Tensor), copied)


def map_leaves(
    tree: Any,
    fn: Callable[[Any], Any],
    is_leaf: Callable[[Any], bool],
    copied: Callable[[Any, Any], Any] | None = None,
) -> Any:
    """``map_tensors`` for the leaves ``is_leaf`` picks (tensors are leaves only if it says so)."""
    if is_leaf(tree):
        return fn(tree)
    kind = _kind(tree)
    if kind is None:
        return tree
    list_children, rebuild = kind
    old = list_children(tree)
    new = [map_leaves(child, fn, is_leaf, copied) for child in old]
    # Unchanged containers are returned as themselves, so a function that mutates a
    # container argument (appends to a list, say) keeps doing so at replay.
    if all(a is b for a, b in zip(old, new)):
        return tree
    copy = rebuild(tree, new)
    return copy if copied is None else copied(tree, copy)


def tensor_leaves(tree: Any) -> list[torch.Tensor]:
    """Every tensor in ``tree``, depth first, in container order."""
    if isinstance(tree, torch.Tensor):
        return [tree]
    return [leaf for child in children(tree) or () for leaf in tensor_leaves(child)]
