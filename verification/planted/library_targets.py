"""Copies of the library, each with one planted bug in what a break sees at replay.

An eager step runs its Python again at every replay, and must see what an eager run of its
region would show it: the state the region set around it, the caller's own containers, its
tensors' attributes. :func:`build` plants one of :data:`BUGS` into a private copy of
``breakable_cudagraph`` (as :mod:`verification.planted.property_targets` does), and the fuzzer
must find each: programs call breaks inside ``with`` blocks, hand the runner's metadata with
tensors made in the capture, and tag tensors with attributes.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any

from verification.planted.property_targets import _copy, _edited, library_target


def _ambient_not_restored(lib: ModuleType) -> None:
    lib.ambient.delta = lambda state, base: None


def _only_autocast_restored(lib: ModuleType) -> None:
    ambient, delta = lib.ambient, lib.ambient.delta
    autocast = ambient.NAMES.index("autocast")

    def autocast_only(state: Any, base: Any) -> Any:
        changed = delta(state, base)
        kept = tuple((i, v) for i, v in changed or () if i == autocast)
        return kept or None

    ambient.delta = autocast_only


BUGS: dict[str, tuple[str, Callable[[ModuleType], None]]] = {
    "ambient_not_restored": (
        "a break replays under the replaying thread's state, not the one its region set around "
        "it (a LoRA break inside autocast computes in float32 at replay)",
        _ambient_not_restored,
    ),
    "only_autocast_restored": (
        "only autocast is applied around a break at replay; grad and inference mode, the "
        "default dtype and the attention backends its region set are not",
        _only_autocast_restored,
    ),
    "caller_container_copied": (
        "a container of the caller's holding a tensor made in the capture is copied at capture, "
        "so the runner's updates between replays (its lengths) never reach the break",
        _edited(
            "arguments",
            "        made = True\n        return CallerObject(original, copy)\n",
            "        return copy\n",
        ),
    ),
    "decorator_without_binding": (
        "the decorator returns an object with __call__ and no __get__, so a decorated method "
        "called through its module is handed no self (every attention layer's forward)",
        _edited(
            "breaks",
            "    return eager_break\n",
            "    return _Unbound(eager_break)\n\n\n"
            "class _Unbound:\n"
            "    def __init__(self, fn):\n"
            "        self._fn = fn\n"
            "        functools.update_wrapper(self, fn)\n\n"
            "    def __call__(self, *args, **kwargs):\n"
            "        return self._fn(*args, **kwargs)\n",
        ),
    ),
    "break_named_by_its_function": (
        "the decorator labels each break with fn.__name__, which a functools.partial or a "
        "kernel object does not have: decorating one fails",
        _edited(
            "breaks",
            "    @functools.wraps(fn)\n    def eager_break(",
            "    label = fn.__name__  # noqa: F841\n\n    @functools.wraps(fn)\n"
            "    def eager_break(",
        ),
    ),
    "attributes_dropped": (
        "the alias standing for a tensor made in the capture drops its Python attributes "
        "(a mask tagged on the logits is gone at replay)",
        _edited("arguments", "        attributes = tensor.__dict__\n", "        attributes = {}\n"),
    ),
}


def build(bug: str | None) -> SimpleNamespace:
    """The library, or a copy of it with ``bug`` of :data:`BUGS` planted."""
    if bug is None:
        import breakable_cudagraph

        return library_target(breakable_cudagraph, "library", "library_targets", None)
    if bug not in BUGS:
        raise ValueError(f"unknown planted bug {bug!r}; choose one of {', '.join(BUGS)}")
    lib = _copy(f"library_{bug}")
    if not getattr(lib, "_planted", False):  # a copy is made once per process
        BUGS[bug][1](lib)
        lib._planted = True
    return library_target(lib, "library", "library_targets", bug)
