"""Loads the upstream code an adapter target wraps: one module of an engine (vLLM, SGLang)
unchanged, from an installed package or from a source checkout, with stand-ins for only the
package imports it needs; or a PyPI package whose capture is wrapped by :class:`WrappedCapture`.

Where the engine cannot be imported whole (a CPU-only machine: no compiled extension, no
``cuda.bindings``, the package's other dependencies not installed), the module's file is executed
under its own dotted name, and each import it makes that would fail gets a stand-in written from
upstream's documented behaviour. The stand-ins stay registered in ``sys.modules``: upstream
imports some of them lazily, at capture. A checkout given by ``--target-path`` (environment
variable :data:`TARGET_PATH_ENV`, so that worker processes inherit it) wins over the installed
package. Neither present: :class:`~verification.errors.UsageError`, one line.
"""

from __future__ import annotations

import argparse
import enum
import importlib
import importlib.metadata
import importlib.util
import os
import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, ClassVar

import torch

from verification.errors import UsageError

TARGET_PATH_ENV = "BCG_TARGET_PATH"


def add_target_path(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target-path",
        type=Path,
        help="a source checkout of the upstream engine the target adapts (vllm, sglang), "
        "certified instead of the installed package",
    )


def use_target_path(args: argparse.Namespace) -> None:
    """``--target-path``: a source checkout (or a folder holding upstream's package folders)."""
    path = getattr(args, "target_path", None)
    if path is None:
        return
    if not path.is_dir():
        raise UsageError(f"--target-path {str(path)!r} is not a directory")
    os.environ[TARGET_PATH_ENV] = str(path.resolve())


def package_root(package: str, relative: str, target: str) -> tuple[Path, str]:
    """The folder holding ``package/`` with ``relative`` in it, and where it came from.

    ``--target-path`` is searched first (``<path>/<package>`` or ``<path>/python/<package>``,
    SGLang's checkout layout), then the installed distribution.
    """
    given = os.environ.get(TARGET_PATH_ENV)
    if given:
        for root in (Path(given), Path(given) / "python"):
            if (root / package / relative).is_file():
                return root, f"source at {root}"
        raise UsageError(
            f"target {target} needs {package}/{relative} under --target-path {given!r}; "
            "none is there"
        )
    try:
        spec = importlib.util.find_spec(package)
    except ValueError:  # a stand-in of ours holds the name: the other target loaded first
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            if (Path(location) / relative).is_file():
                return Path(location).parent, "installed"
    raise UsageError(
        f"target {target} needs {package} with {package}/{relative}: "
        f"pip install --no-deps {package}, or give a checkout with --target-path"
    )


def package_version(root: Path, package: str, version_file: str) -> str | None:
    """The version the package's own version file states, or the installed one."""
    text = root / package / version_file
    if text.is_file():
        found = re.search(
            r"^__version__\b[^'\"\n]*=[^'\"\n]*['\"]([^'\"]+)['\"]", text.read_text(), re.M
        )
        if found:
            return found.group(1)
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def load_engine_module(
    package: str, relative: str, target: str, module: str, from_files: Callable[[Path], Any]
) -> tuple[Any, str | None, str]:
    """``module`` of ``package`` (whose file ``relative`` must exist), its version and origin.

    An installed package on a machine with CUDA is imported whole; where that fails (a
    dependency missing) or elsewhere, ``from_files(root)`` executes upstream's files under
    stand-ins. A failed whole import leaves no half-imported module behind for the second way.
    """
    root, origin = package_root(package, relative, target)
    version = package_version(root, package, "_version.py")
    if origin == "installed" and torch.cuda.is_available():
        before = set(sys.modules)
        try:
            return importlib.import_module(module), version, "imported whole"
        except ImportError:
            for name in set(sys.modules) - before:
                del sys.modules[name]
    return from_files(root), version, origin


def require_package(module: str, target: str, install: str) -> ModuleType:
    """The PyPI package ``module`` an adapter wraps; missing, a one-line usage error."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        raise UsageError(f"target {target} needs the package: {install}") from error


class WrappedCapture:
    """vLLM's capture names over a package's capture context: a subclass makes the package's
    objects in ``__init__`` (its signature is what the harness inspects for options), sets
    ``_replayable`` (the object that replays and resets) and ``_eager`` (the package's break
    decorator), and opens the package's context in :meth:`_open`.

    The record of the open capture is per thread and per adapter class, as the packages keep
    theirs (a context variable): the adapter adds no state that threads share.
    """

    _eager: ClassVar[Callable[[Callable[..., Any]], Callable[..., Any]]]
    _replayable: Any
    _open_captures: ClassVar[threading.local]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._open_captures = threading.local()

    def _open(self) -> Any:
        raise NotImplementedError

    @classmethod
    def _stack(cls) -> list[WrappedCapture]:
        return cls._open_captures.__dict__.setdefault("stack", [])

    @classmethod
    def current(cls) -> WrappedCapture | None:
        stack = cls._stack()
        return stack[-1] if stack else None

    def __enter__(self) -> WrappedCapture:
        context = self._open()
        context.__enter__()
        self._context = context
        self._stack().append(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self._stack().remove(self)
        context, self._context = self._context, None
        return bool(context.__exit__(exc_type, exc, tb))

    def add_eager(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Runs ``fn`` now as an eager break and again at every replay."""
        return type(self)._eager(fn)(*args, **kwargs)

    def replay(self) -> None:
        self._replayable.replay()

    def reset(self) -> None:
        self._replayable.reset()


def stand_in(name: str, **attributes: Any) -> ModuleType:
    """Registers a module called ``name`` holding ``attributes`` (and its parent packages)."""
    module = sys.modules.get(name)
    if module is None:
        module = ModuleType(name)
        module.__path__ = []  # a package, so that submodules can be registered under it
        module.__standin__ = True
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(stand_in(parent), child, module)
    for key, value in attributes.items():
        setattr(module, key, value)
    return module


def load_file(name: str, path: Path) -> ModuleType:
    """Executes upstream's file ``path`` as the module ``name``, its imports resolving through
    ``sys.modules`` (so through the stand-ins registered before)."""
    existing = sys.modules.get(name)
    if existing is not None and getattr(existing, "__file__", None) == str(path):
        return existing
    parent, _, child = name.rpartition(".")
    if parent:
        stand_in(parent)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    if parent:
        setattr(sys.modules[parent], child, module)
    return module


def weak_ref_tensor(tensor: Any) -> Any:
    """vLLM's and sgl_kernel's ``weak_ref_tensor``, as documented and as their C++ does it:
    ``torch::from_blob(tensor.data_ptr(), tensor.sizes(), tensor.strides(), tensor.options())``,
    a tensor over the same memory that does not own it. It is a plain tensor: a tensor
    subclass, a conjugate or a negative bit is not carried over. A host tensor is refused."""
    if not tensor.is_cuda:
        raise RuntimeError("Tensor must be on CUDA device")
    if tensor.numel() == 0:
        span = 0
    else:
        span = 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
    nbytes = span * tensor.element_size()
    storage = torch._C._construct_storage_from_data_pointer(
        tensor.data_ptr(), tensor.device, nbytes
    )
    # Empty, so that it allocates nothing: from_blob allocates nothing, and vLLM's wrapper
    # calls this while a capture segment is open, where one byte would reserve a 2 MiB
    # segment of the graph pool that vLLM's own code never reserves.
    plain = torch.empty(0, dtype=tensor.dtype, device=tensor.device)
    return plain.set_(storage, 0, tuple(tensor.shape), tuple(tensor.stride()))


class CudaRuntime:
    """``cuda.bindings.runtime`` as far as upstream's capture code calls it: the real module
    where it is installed, except that ``cudaStreamGetCaptureInfo`` is answered by the
    simulator while the simulator runs (its stream handles are not the driver's)."""

    class cudaError_t(enum.IntEnum):
        cudaSuccess = 0

    class cudaStreamCaptureStatus(enum.IntEnum):
        cudaStreamCaptureStatusNone = 0
        cudaStreamCaptureStatusActive = 1
        cudaStreamCaptureStatusInvalidated = 2

    def __init__(self) -> None:
        try:
            from cuda.bindings import runtime as real
        except ImportError:
            real = None
        self._real = real
        if real is not None:
            self.cudaError_t = real.cudaError_t
            self.cudaStreamCaptureStatus = real.cudaStreamCaptureStatus

    def cudaStreamGetCaptureInfo(self, stream: int) -> tuple[Any, ...]:
        from verification import sim
        from verification.sim.cuda_api import stream_capture_status

        if sim.is_active() or self._real is None:
            status = stream_capture_status(int(stream))
            member = f"cudaStreamCaptureStatus{status.capitalize()}"
            return self.cudaError_t.cudaSuccess, getattr(self.cudaStreamCaptureStatus, member), 0
        return self._real.cudaStreamGetCaptureInfo(stream)

    def cudaGetErrorString(self, error: Any) -> tuple[Any, bytes]:
        if self._real is not None:
            return self._real.cudaGetErrorString(error)
        return self.cudaError_t.cudaSuccess, f"CUDA error {int(error)}".encode()

    def __getattr__(self, name: str) -> Any:
        if self._real is None:
            raise AttributeError(f"cuda.bindings.runtime stand-in has no {name}")
        return getattr(self._real, name)
