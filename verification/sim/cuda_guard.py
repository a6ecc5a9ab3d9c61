"""Registers a CUDA device guard in CPU-only torch, built once from ``cuda_guard.cpp``.

torch opens a device guard before some ops on CUDA tensors (indexing, ``nonzero``); CPU
torch has none for CUDA and refuses them. The guard knows one device, index 0, and
switches nothing. :func:`accelerator` makes CUDA torch's accelerator while the simulator
is open (the autograd engine needs one for CUDA gradients). The library is compiled with
the system C++ compiler into a per-user cache the first time the simulator starts (about
10 s), then loaded in every process.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

import torch

_SOURCE = Path(__file__).with_name("cuda_guard.cpp")
_library: ctypes.CDLL | None = None


def _cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(root) / "breakable-cudagraph-sim"


def _library_path() -> Path:
    key = hashlib.sha256(_SOURCE.read_bytes() + torch.__version__.encode()).hexdigest()[:16]
    return _cache_dir() / f"cuda_guard-{key}.so"


def _build(target: Path) -> None:
    torch_dir = Path(torch.__file__).parent
    compiler = os.environ.get("CXX", "c++")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    command = [
        compiler, "-O1", "-shared", "-fPIC", "-std=c++17",
        f"-I{torch_dir / 'include'}", str(_SOURCE),
        f"-L{torch_dir / 'lib'}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{torch_dir / 'lib'}", "-o", partial,
    ]  # fmt: skip
    try:
        subprocess.run(command, check=True, capture_output=True, text=True)
        os.replace(partial, target)  # atomic: concurrent builders (xdist workers) agree
    except (OSError, subprocess.CalledProcessError) as error:
        os.unlink(partial)
        detail = getattr(error, "stderr", "") or str(error)
        raise RuntimeError(
            f"the CUDA simulator needs a C++ compiler ({compiler}) once, to build its "
            f"device guard: {detail.strip()[:500]}"
        ) from error


def install() -> None:
    """Makes sure the guard is registered in this process (idempotent)."""
    global _library
    if _library is not None or torch.cuda.is_available():
        return
    path = _library_path()
    if not path.exists():
        _build(path)
    _library = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)


def accelerator(on: bool) -> None:
    """Makes CUDA torch's accelerator (or gives CPU torch back its none); a CUDA build is
    left alone."""
    if _library is not None:
        _library.bcg_sim_cuda_accelerator(int(on))
