"""The ambient state a break is called under, and what its captured region changed of it.

Graph segments keep what the state made of them (autocast's dtypes are in the kernels), but an
eager step runs its Python again at every replay. ``record()`` reads the state torch keeps per
thread (grad, inference and forward-AD modes, autocast per device type with its dtype and cache,
the torch-function mode stack) and the process-wide settings that model code sets with ``with``
blocks around a call (default dtype, attention backends, matmul precision, cuDNN and determinism
flags). A capture records it on entry and at every break; ``delta`` is what a break's ``with``
blocks inside the region changed, and at replay ``enter`` applies just that on top of the
replaying thread's own state, as an eager run of the region would, and ``leave`` undoes it.
A break called under the entry state has no delta and costs replay nothing. The stream is not
part of the state: a replay runs on its caller's stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

_C = torch._C

# Device types autocast can be on for; reading each is dear, so they are read only when
# ``_is_any_autocast_enabled`` says one is on.
_AUTOCAST_DEVICES: tuple[str, ...] = tuple(
    d
    for d in ("cuda", "cpu", "xpu", "hpu", "mps", "mtia", "maia", "xla", "ipu", "privateuseone")
    if _C._is_autocast_available(d)
)
AutocastState = tuple[tuple[str, bool, torch.dtype], ...]


def _every_autocast() -> AutocastState:
    return tuple(
        (d, _C.is_autocast_enabled(d), _C.get_autocast_dtype(d)) for d in _AUTOCAST_DEVICES
    )


def _autocast() -> AutocastState | None:
    # None stands for "off on every device", whatever dtypes are set: the usual state, read
    # with one call instead of two per device type.
    return _every_autocast() if _C._is_any_autocast_enabled() else None


def _set_autocast(value: AutocastState) -> None:
    for device, enabled, dtype in value:
        _C.set_autocast_enabled(device, enabled)
        _C.set_autocast_dtype(device, dtype)


def _function_modes() -> tuple[Any, ...]:
    depth = _C._len_torch_function_stack()
    return tuple(_C._get_function_stack_at(i) for i in range(depth)) if depth else ()


def _set_function_modes(modes: tuple[Any, ...]) -> None:
    while _C._len_torch_function_stack():
        _C._pop_torch_function_stack()
    for mode in modes:
        _C._push_on_torch_function_stack(mode)


def _optional(name: str) -> Callable[..., Any] | None:
    return getattr(_C, name, None)


# What the state is made of, as data: (name, read, write). Thread-local items first; the
# process-wide ones are what a model sets around one call with a ``with`` block
# (``torch.nn.attention.sdpa_kernel``, ``torch.backends.cudnn.flags``, ...). An item whose
# accessors this torch lacks is left out.
_ITEMS: tuple[tuple[str, Callable[[], Any], Callable[[Any], None]], ...] = tuple(
    (name, read, write)
    for name, read, write in (
        ("grad mode", _C.is_grad_enabled, _C._set_grad_enabled),
        ("inference mode", _C.is_inference_mode_enabled, None),  # entered by a guard, below
        ("forward-mode AD", _C._is_fwd_grad_enabled, _C._set_fwd_grad_enabled),
        ("autocast", _autocast, _set_autocast),
        ("autocast cache", _C.is_autocast_cache_enabled, _C.set_autocast_cache_enabled),
        ("torch-function modes", _function_modes, _set_function_modes),
        ("default dtype", torch.get_default_dtype, _C._set_default_dtype),
        ("flash attention", _optional("_get_flash_sdp_enabled"), _optional("_set_sdp_use_flash")),
        (
            "memory-efficient attention",
            _optional("_get_mem_efficient_sdp_enabled"),
            _optional("_set_sdp_use_mem_efficient"),
        ),
        ("math attention", _optional("_get_math_sdp_enabled"), _optional("_set_sdp_use_math")),
        ("cuDNN attention", _optional("_get_cudnn_sdp_enabled"), _optional("_set_sdp_use_cudnn")),
        (
            "float32 matmul precision",
            _optional("_get_float32_matmul_precision"),
            _optional("_set_float32_matmul_precision"),
        ),
        ("cuDNN", _C._get_cudnn_enabled, _C._set_cudnn_enabled),
        ("cuDNN TF32", _C._get_cudnn_allow_tf32, _C._set_cudnn_allow_tf32),
        ("cuDNN deterministic", _C._get_cudnn_deterministic, _C._set_cudnn_deterministic),
        ("cuDNN benchmark", _C._get_cudnn_benchmark, _C._set_cudnn_benchmark),
        (
            "deterministic algorithms",
            _C._get_deterministic_algorithms,
            lambda on: _C._set_deterministic_algorithms(
                on, warn_only=_C._get_deterministic_algorithms_warn_only()
            ),
        ),
    )
    if read is not None and (write is not None or name == "inference mode")
)
_INFERENCE = [name for name, _, _ in _ITEMS].index("inference mode")
_READERS: tuple[Callable[[], Any], ...] = tuple(read for _, read, _ in _ITEMS)
NAMES: tuple[str, ...] = tuple(name for name, _, _ in _ITEMS)

State = tuple[Any, ...]
# What a break's call changed from its capture's entry: (item index, value) pairs.
Delta = tuple[tuple[int, Any], ...]
# Equal states are one object, so that a capture's breaks mostly share one.
_interned: dict[State, State] = {}


# One expression calling every reader: every break pays this at capture, and a loop over the
# readers costs half as much again.
_read_all: Callable[[], State] = eval(
    "lambda: (" + "".join(f"r{i}(), " for i in range(len(_READERS))) + ")",
    {f"r{i}": read for i, read in enumerate(_READERS)},
)


def record() -> State:
    """The ambient state of this thread now."""
    state = _read_all()
    if len(_interned) > 1024:  # states holding mode objects of many captures: forget them
        _interned.clear()
    return _interned.setdefault(state, state)


def read() -> State:
    """The ambient state of this thread now, not interned: for comparing with a recorded one."""
    return _read_all()


def delta(state: State, base: State | None) -> Delta | None:
    """What ``state`` sets otherwise than ``base``; None where they agree."""
    if state is base or base is None or state == base:
        return None
    changed = tuple((i, value) for i, (value, was) in enumerate(zip(state, base)) if value != was)
    return changed or None


class Undo:
    """What :func:`enter` replaced, for :func:`leave`."""

    __slots__ = ("guard", "nested", "restore")

    def __init__(self) -> None:
        self.restore: list[tuple[Callable[[Any], None], Any]] = []
        self.guard: Any = None  # an inference-mode guard holds its mode while it lives
        self.nested = False


def enter(changed: Delta) -> Undo:
    """Applies ``changed`` to this thread's state now; :func:`leave` puts back what it
    replaced. Items the state already holds are left alone."""
    undo = Undo()
    try:
        for index, value in changed:
            if index == _INFERENCE:
                if _C.is_inference_mode_enabled() != value:
                    # Inference mode has no setter: a guard object holds it while it lives.
                    undo.guard = _C._InferenceMode(value)
                continue
            write = _ITEMS[index][2]
            if write is _set_autocast:
                # Every device's flag and dtype is put back (``None`` says only that autocast
                # is off), nested as torch.autocast nests, so that casts cached meanwhile
                # are dropped on leaving.
                was = _every_autocast()
                if value is None:
                    value = tuple((device, False, dtype) for device, _, dtype in was)
                if value == was:
                    continue
                _C.autocast_increment_nesting()
                undo.nested = True
            else:
                was = _READERS[index]()
                if value == was:
                    continue
            undo.restore.append((write, was))
            write(value)
    except BaseException:
        leave(undo)
        raise
    return undo


def leave(undo: Undo) -> None:
    """Puts back what :func:`enter` replaced, last change first."""
    # The inference-mode guard puts back the grad mode it found when made: it goes first,
    # so that the grad mode is then put back as the caller had it.
    undo.guard = None
    for write, was in reversed(undo.restore):
        write(was)
    if undo.nested and _C.autocast_decrement_nesting() == 0:
        _C.clear_autocast_cache()
