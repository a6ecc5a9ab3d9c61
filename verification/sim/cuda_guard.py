"""Registers a CUDA device guard in CPU-only torch, built once from ``cuda_guard.cpp``.

torch opens a device guard before some ops on CUDA tensors (indexing, ``nonzero``); CPU
torch has none for CUDA and refuses them. The guard knows one device, index 0, and
switches nothing. :func:`accelerator` makes CUDA torch's accelerator while the simulator
is open (the autograd engine needs one for CUDA gradients).

The library is built by ``torch.utils.cpp_extension`` (torch's own compiler flags and ABI,
a lock for concurrent builders such as xdist workers) into a per-user cache the first time
the simulator starts, then loaded in every process. The build says so in one line on
stderr and prints nothing else: torch's tooling logs (its "No CUDA runtime is found" on a
machine with a CUDA toolkit but no visible GPU, as a simulator run on a GPU host is) are
not the user's. Without a C++ compiler or ninja, :func:`install` raises
:class:`SimulatorBuildError`, a one-line usage error naming what to install.

Making CUDA the accelerator overwrites the vtable pointer of the hooks object CPU torch
made at start-up (see ``cuda_guard.cpp`` for why no registration can do it). That relies on
torch's layout, so it is done only for the torch versions in :data:`HOOKS_SWAP_TORCH` and
only if torch then reports CUDA as its accelerator, and CPU again once it is undone; any
other case raises :class:`HooksLayoutError` instead of running on a half-swapped torch.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import logging
import os
import shutil
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch

from verification.errors import UsageError

_SOURCE = Path(__file__).with_name("cuda_guard.cpp")
# The torch releases (major.minor) whose CPU build the vtable swap was checked against.
HOOKS_SWAP_TORCH = ("2.13",)
_library: ctypes.CDLL | None = None


class SimulatorBuildError(UsageError):
    """The guard cannot be built on this machine: a tool is missing, or the build failed."""


class HooksLayoutError(RuntimeError):
    """This torch's CUDA hooks are not what the vtable swap was checked against."""


def _cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(root) / "breakable-cudagraph-sim"


def build_directory() -> Path:
    """One directory per source and torch build, so that torch's extension tooling never
    has to rebuild over a library another process of another torch has loaded."""
    key = hashlib.sha256(_SOURCE.read_bytes() + torch.__version__.encode()).hexdigest()[:16]
    return _cache_dir() / f"cuda_guard-{key}"


def _ninja_on_path() -> None:
    """Puts the ninja of the ``ninja`` package (installed with the harness) on ``PATH``, where
    torch's tooling looks for it: a venv used without activating it has its bin off ``PATH``."""
    try:
        import ninja  # type: ignore[import-untyped]
    except ImportError:
        return
    folder = getattr(ninja, "BIN_DIR", None)
    path = os.environ.get("PATH", "")
    if folder and folder not in path.split(os.pathsep):
        os.environ["PATH"] = folder + os.pathsep + path


@contextlib.contextmanager
def _torch_tooling_quiet() -> Iterator[None]:
    """torch's extension tooling without its log and warnings: it logs where CUDA_HOME
    points when it is imported on a machine whose CUDA it cannot use, and warns about
    compilers; what goes wrong in the build still raises."""
    logger = logging.getLogger("torch.utils.cpp_extension")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def missing_tools() -> dict[str, str]:
    """What the build needs and this machine lacks (the C++ compiler torch would use,
    ``$CXX`` or else ``c++``, and ninja), each with how to install it."""
    with _torch_tooling_quiet():
        from torch.utils.cpp_extension import is_ninja_available

    _ninja_on_path()
    missing = {}
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        missing[f"a C++ compiler ({compiler} not found)"] = "g++ (Debian: apt-get install g++)"
    if not is_ninja_available():
        missing["ninja"] = "ninja (pip install ninja; Debian: apt-get install ninja-build)"
    return missing


_NAME = "bcg_sim_cuda_guard"


def _build() -> str:
    """Builds (or finds built) the guard library; returns its path."""
    directory = build_directory()
    built = directory / f"{_NAME}.so"
    # torch's tooling holds ``lock`` while it builds, so a library without it is complete;
    # loading it directly spares every later process a run of ninja (a quarter second).
    if built.exists() and not (directory / "lock").exists():
        return str(built)
    missing = missing_tools()
    if missing:
        raise SimulatorBuildError(
            "the CUDA simulator builds a small C++ extension on first use and needs "
            f"{' and '.join(missing)}: install {' and '.join(missing.values())}"
        )
    from torch.utils.cpp_extension import load

    directory.mkdir(parents=True, exist_ok=True)
    print(
        f"building the CUDA simulator's C++ extension in {directory} (once per torch version)",
        file=sys.stderr,
        flush=True,
    )
    try:
        with _torch_tooling_quiet():
            return load(
                name=_NAME,
                sources=[str(_SOURCE)],
                extra_cflags=["-O1"],
                build_directory=str(directory),
                is_python_module=False,
            )
    except (OSError, RuntimeError) as error:
        detail = " ".join(str(error).split())[:300]
        raise SimulatorBuildError(
            f"the CUDA simulator could not build its C++ extension in {directory}: {detail}"
        ) from error


def check_hooks_swap(library: ctypes.CDLL) -> None:
    """Raises :class:`HooksLayoutError` unless the vtable swap is known to hold here: the
    torch version is one it was checked against, and torch's own accelerator query sees
    CUDA once swapped and nothing once restored. A CUDA build (hooks not the stub) passes:
    nothing is swapped there."""
    if not library.bcg_sim_hooks_are_stub():
        return
    release = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    if release not in HOOKS_SWAP_TORCH:
        raise HooksLayoutError(
            f"the CUDA simulator makes CUDA the accelerator of CPU torch by swapping the "
            f"vtable of its CUDA hooks, checked on torch {', '.join(HOOKS_SWAP_TORCH)} only; "
            f"this is torch {torch.__version__}: install torch=={HOOKS_SWAP_TORCH[-1]}.* "
            "or check cuda_guard.cpp against this torch and add it to HOOKS_SWAP_TORCH"
        )
    library.bcg_sim_cuda_accelerator(1)
    swapped = torch._C._accelerator_getAccelerator()
    library.bcg_sim_cuda_accelerator(0)
    restored = torch._C._accelerator_getAccelerator()
    if getattr(swapped, "type", None) != "cuda" or restored is not None:
        raise HooksLayoutError(
            f"torch {torch.__version__} does not see the simulator's CUDA hooks (accelerator "
            f"{swapped} when swapped, {restored} when restored): its hooks layout differs "
            "from what cuda_guard.cpp expects"
        )


def install() -> None:
    """Makes sure the guard is registered in this process (idempotent)."""
    global _library
    if _library is not None or torch.cuda.is_available():
        return
    library = ctypes.CDLL(_build(), mode=ctypes.RTLD_GLOBAL)
    check_hooks_swap(library)
    _library = library


def accelerator(on: bool) -> None:
    """Makes CUDA torch's accelerator (or gives CPU torch back its none); a CUDA build is
    left alone."""
    if _library is not None:
        _library.bcg_sim_cuda_accelerator(int(on))
