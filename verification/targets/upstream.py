"""Loads one module of an upstream engine (vLLM, SGLang) unchanged, from an installed package or
from a source checkout, with stand-ins for only the package imports it needs.

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
import importlib.metadata
import importlib.util
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

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
    plain = torch.empty((), dtype=tensor.dtype, device=tensor.device)
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
