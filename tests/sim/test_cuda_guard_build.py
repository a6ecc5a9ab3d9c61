"""The simulator's C++ guard: built by torch's extension tooling, refused with one line
where a tool is missing, and its vtable swap refused where it was not checked."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from verification.errors import EXIT_USAGE
from verification.sim import cuda_guard

pytestmark = pytest.mark.sim
ROOT = Path(__file__).resolve().parents[2]


def _python(args: list[str], cache: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "XDG_CACHE_HOME": str(cache), **env}
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_machine_without_a_compiler_gets_one_line_naming_what_to_install(tmp_path):
    done = _python(
        ["-m", "verification", "fuzz", "--device", "sim"], tmp_path, CXX="/nonexistent/g++"
    )
    assert done.returncode == EXIT_USAGE
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "needs a C++ compiler (/nonexistent/g++ not found)" in lines[0]
    assert "install g++" in lines[0]


def test_a_machine_without_ninja_is_told_to_install_it(tmp_path, monkeypatch):
    import torch.utils.cpp_extension

    monkeypatch.setattr(torch.utils.cpp_extension, "is_ninja_available", lambda: False)
    monkeypatch.setattr(cuda_guard, "build_directory", lambda: tmp_path / "guard")
    with pytest.raises(cuda_guard.SimulatorBuildError, match=r"needs ninja: install ninja"):
        cuda_guard._build()


def test_concurrent_first_builds_share_one_library_and_say_only_that_they_build(tmp_path):
    # Two xdist workers starting the simulator at once on a fresh machine, with a CUDA
    # toolkit installed (CUDA_HOME) but no GPU visible, as a simulator run on a GPU host.
    code = "from verification.sim import cuda_guard; cuda_guard.install(); print('ok')"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env={**os.environ, "XDG_CACHE_HOME": str(tmp_path), "CUDA_HOME": str(tmp_path)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=300) for p in processes]
    assert [p.returncode for p in processes] == [0, 0], outputs
    assert len(list(tmp_path.rglob("*.so"))) == 1
    for _, err in outputs:
        lines = err.splitlines()
        assert len(lines) <= 1 and all(_BUILDING in line for line in lines), err
    assert any(err for _, err in outputs)  # the one that built said so


_BUILDING = "building the CUDA simulator's C++ extension"


def test_torch_tooling_says_nothing_where_a_cuda_toolkit_is_installed_without_a_gpu(
    tmp_path, monkeypatch, capfd
):
    # A CUDA build of torch with its GPU hidden (a simulator run on a GPU host) and a toolkit
    # at CUDA_HOME logs "No CUDA runtime is found, using CUDA_HOME=..." when its extension
    # tooling is imported: the tooling is imported afresh here as it would be there.
    import torch.utils

    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "_is_compiled", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    loaded = sys.modules.get("torch.utils.cpp_extension")
    monkeypatch.delitem(sys.modules, "torch.utils.cpp_extension", raising=False)
    if loaded is not None:  # put back afterwards, where other tests patch it
        monkeypatch.setattr(torch.utils, "cpp_extension", loaded)
    cuda_guard.missing_tools()
    assert sys.modules["torch.utils.cpp_extension"].CUDA_HOME == str(tmp_path)  # it looked
    assert capfd.readouterr().err == ""


def test_a_build_says_in_one_line_that_it_builds_and_nothing_of_torch_tooling(
    tmp_path, monkeypatch, capsys
):
    import logging
    import warnings

    import torch.utils.cpp_extension

    def load(**kwargs):
        logging.getLogger("torch.utils.cpp_extension").warning("compiler chatter")
        warnings.warn("compiler ABI chatter", UserWarning, stacklevel=1)
        built = Path(kwargs["build_directory"]) / "built.so"
        built.write_text("")
        return str(built)

    monkeypatch.setattr(torch.utils.cpp_extension, "load", load)
    monkeypatch.setattr(cuda_guard, "build_directory", lambda: tmp_path / "guard")
    monkeypatch.setattr(cuda_guard, "missing_tools", dict)
    cuda_guard._build()
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and _BUILDING in err, err


def test_a_built_library_is_loaded_without_a_word(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cuda_guard, "build_directory", lambda: tmp_path)
    (tmp_path / f"{cuda_guard._NAME}.so").write_text("")
    assert cuda_guard._build() == str(tmp_path / f"{cuda_guard._NAME}.so")
    assert capsys.readouterr().err == ""


def _guard_library() -> ctypes.CDLL:
    if torch.cuda.is_available():
        pytest.skip("a CUDA build has its own hooks: nothing is swapped")
    return ctypes.CDLL(cuda_guard._build())


def test_the_vtable_swap_is_refused_on_a_torch_it_was_not_checked_on(monkeypatch):
    library = _guard_library()
    monkeypatch.setattr(cuda_guard, "HOOKS_SWAP_TORCH", ("1.0",))
    with pytest.raises(cuda_guard.HooksLayoutError, match=r"checked on torch 1\.0 only"):
        cuda_guard.check_hooks_swap(library)
    assert torch._C._accelerator_getAccelerator() is None  # nothing was swapped


def test_the_vtable_swap_is_refused_when_torch_does_not_see_it(monkeypatch):
    library = _guard_library()
    monkeypatch.setattr(torch._C, "_accelerator_getAccelerator", lambda: None)
    with pytest.raises(cuda_guard.HooksLayoutError, match="hooks layout differs"):
        cuda_guard.check_hooks_swap(library)


def test_the_vtable_swap_passes_its_check_on_this_torch():
    cuda_guard.check_hooks_swap(_guard_library())
    assert torch._C._accelerator_getAccelerator() is None  # restored after the check
