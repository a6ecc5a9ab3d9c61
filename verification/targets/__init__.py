"""Loads the implementation under test: an importable module name or a ready-made object.

A target exposes ``BreakableCUDAGraphCapture`` (a capture context manager taking ``pool=``,
with ``add_eager``, ``replay`` and ``current``) and ``eager_break_during_capture`` (the
break decorator). :func:`load_target` checks those names and raises
:class:`~verification.errors.UsageError` naming whatever is missing. The target's break
contract is the one it declares (see :mod:`verification.targets.contracts`) unless overridden,
and the caller duties it declares it fulfils itself (``GUARDS``) are checked as it loads. A
target that promises to keep no capture intermediate it was given alive declares
:data:`RELEASE_DECLARATION`; holding one is then a bug, not memory held. Optional features
are read where a check needs them: a target exposing :data:`CAPTURE_SET` (a batch-size sweep
as ``breakable_cudagraph.CaptureSet`` takes it) is checked through it, others are not.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
from dataclasses import dataclass
from typing import Any

from verification.errors import UsageError
from verification.targets.contracts import (
    Contract,
    caller_duties,
    declared_contract,
    get_contract,
    guarded_duties,
)

DEFAULT_TARGET = "breakable_cudagraph"
REQUIRED_CAPTURE_METHODS = ("add_eager", "replay", "current")
# ``RELEASES_BREAK_ARGUMENTS = True``: a tensor made inside the capture and given to a break
# dies when its caller drops it, while the capture lives (held by a non-owning alias).
RELEASE_DECLARATION = "RELEASES_BREAK_ARGUMENTS"
# ``CaptureSet(fn, sizes, example_inputs, pad_value=...)``: every size captured at start-up into
# one pool, a call replaying the smallest size that fits its batch (optional).
CAPTURE_SET = "CaptureSet"


@dataclass(frozen=True)
class Target:
    """A checked target. ``import_code`` is the Python a reproducer uses to bind ``target``."""

    name: str
    module: Any
    import_code: str
    contract: Contract
    version: str | None

    @property
    def supports_tensor_returns(self) -> bool:
        return self.contract.refreshes_returns

    @property
    def caller_duties(self) -> tuple[str, ...]:
        """What the harness does for the target, as its engine's runner does."""
        return caller_duties(self.module, self.contract)

    @property
    def releases_break_arguments(self) -> bool:
        return getattr(self.module, RELEASE_DECLARATION, False) is True

    @property
    def capture_set(self) -> Any | None:
        """The target's capture-set class (:data:`CAPTURE_SET`), or None if it has none."""
        return getattr(self.module, CAPTURE_SET, None)

    @property
    def BreakableCUDAGraphCapture(self) -> Any:
        return self.module.BreakableCUDAGraphCapture

    @property
    def eager_break_during_capture(self) -> Any:
        return self.module.eager_break_during_capture


def _import(name: str) -> Any:
    """The target's module; any failure to import it is the user's to fix: one line, no traceback."""
    if not name.strip():
        raise UsageError("the target module name is empty; give an importable module name")
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name is not None and name.startswith(error.name):
            raise UsageError(
                f"target module {name!r} cannot be imported: no module named {error.name!r}"
            ) from None
        raise UsageError(f"target module {name!r} cannot be imported: {error}") from None
    except SyntaxError as error:
        where = f"{error.filename}:{error.lineno}" if error.filename else "its source"
        raise UsageError(
            f"target module {name!r} cannot be imported: syntax error at {where} ({error.msg})"
        ) from None
    except Exception as error:
        # The module itself raised while importing (or the name is malformed, e.g. '.x').
        raise UsageError(
            f"target module {name!r} cannot be imported: it raised "
            f"{type(error).__name__}: {' '.join(str(error).split())}"
        ) from None


def _missing(module: Any) -> list[str]:
    missing = [
        n
        for n in ("BreakableCUDAGraphCapture", "eager_break_during_capture")
        if not hasattr(module, n)
    ]
    capture = getattr(module, "BreakableCUDAGraphCapture", None)
    if capture is not None:
        missing += [
            f"BreakableCUDAGraphCapture.{m}"
            for m in REQUIRED_CAPTURE_METHODS
            if not hasattr(capture, m)
        ]
    return missing


def load_target(target: str | Any = DEFAULT_TARGET, contract: str | None = None) -> Target:
    """Imports (or accepts) a target and checks that it has what the harness calls.

    ``contract`` overrides the contract the target declares (``--contract``).
    """
    if isinstance(target, Target):
        if contract is None:
            return target
        return dataclasses.replace(target, contract=get_contract(contract))
    module = _import(target) if isinstance(target, str) else target
    name = target if isinstance(target, str) else getattr(module, "__name__", type(module).__name__)
    missing = _missing(module)
    if missing:
        raise UsageError(
            f"target {name!r} lacks {', '.join(missing)}; it is not a breakable capture library"
        )
    guarded_duties(
        module, name
    )  # an unknown duty's name is the user's to fix, before any check runs
    default_import = f"import {name} as target" if isinstance(target, str) else ""
    return Target(
        name=name,
        module=module,
        import_code=getattr(module, "REPRODUCER_IMPORT", default_import),
        contract=declared_contract(module) if contract is None else get_contract(contract),
        version=_version(module),
    )


def _version(module: Any) -> str | None:
    """``__version__``, else the installed distribution's version of the top-level package."""
    version = getattr(module, "__version__", None)
    if version is not None:
        return str(version)
    top = str(getattr(module, "__name__", "")).partition(".")[0]
    for dist in importlib.metadata.packages_distributions().get(top, []):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None
