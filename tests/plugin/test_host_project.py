"""The ``bcg`` pytest plugin, seen from a host project: each test runs pytest in a subprocess
on a throwaway project (pytester) with the plugin loaded as an installed project would load it.

Covered: usage errors instead of INTERNALERROR, the host's hypothesis profile left alone,
session fixtures passing hypothesis's health check, the gpu/sim markers, the guard against
leaked captures and streams, BCG_HYPOTHESIS_DB for ``@given`` tests, and ``--bcg-shard``
dealing out exactly the unsharded fuzz chunks.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
_TIMEOUT = 300


def _plugin_args() -> list[str]:
    # Installed (CI's editable install too), the entry point loads the plugin; from a bare
    # checkout it must be named, and naming it when installed would register it twice.
    eps = importlib.metadata.entry_points(group="pytest11")
    return [] if any(ep.name == "bcg" for ep in eps) else ["-p", "bcg_pytest_plugin"]


@pytest.fixture
def host(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A host project that has not asked for anything through the environment."""
    for name in ("BCG_PROFILE", "BCG_DEVICE", "BCG_HYPOTHESIS_DB", "PYTEST_ADDOPTS"):
        monkeypatch.delenv(name, raising=False)
    # This checkout's plugin, not that of whichever checkout is installed (editable).
    paths = [str(pytester.path), str(ROOT), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    return pytester


def _run(host: pytest.Pytester, *args: str) -> pytest.RunResult:
    return host.runpytest_subprocess(*_plugin_args(), "-p", "no:cacheprovider", *args,
                                     timeout=_TIMEOUT)  # fmt: skip


NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")


@pytest.mark.parametrize(
    "option, message",
    [
        ("--bcg-shard=3/2", "--bcg-shard expects i/n"),
        ("--bcg-target=no_such_target_module", "--bcg-target=no_such_target_module: *"),
        ("--bcg-target=", "--bcg-target=: the target module name is empty*"),
        ("--bcg-target=raising_target", "raising_target* it raised RuntimeError: at import*"),
        ("--bcg-target=syntax_target", "syntax_target* syntax error at *syntax_target.py:1*"),
        ("--bcg-profile=nightly", "unknown bcg profile 'nightly'"),
        ("--bcg-device=tpu", "must be one of auto, cuda, sim"),
        pytest.param("--bcg-device=cuda", "--bcg-device=cuda: torch sees no GPU", marks=NO_GPU),
        pytest.param("BCG_DEVICE=cuda", "BCG_DEVICE=cuda: torch sees no GPU", marks=NO_GPU),
        ("BCG_DEVICE=tpu", "BCG_DEVICE=tpu: must be one of*"),
        ("BCG_PROFILE=nightly", "BCG_PROFILE: unknown bcg profile 'nightly'"),
    ],
)
def test_bad_option_is_a_usage_error_not_an_internal_error(host, monkeypatch, option, message):
    host.makepyfile("def test_nothing(): pass")
    host.makepyfile(raising_target="raise RuntimeError('at import')")
    host.makepyfile(syntax_target="def broken(:\n    pass")
    if option.startswith("BCG_"):
        monkeypatch.setenv(*option.split("=", 1))
        option = "-q"
    result = _run(host, option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output and "Traceback" not in output, output
    result.stderr.fnmatch_lines([f"ERROR: *{message}*"])


HOST_CONFTEST = """
import pytest
from hypothesis import settings

settings.register_profile("ci", max_examples=1000)
settings.load_profile("ci")


@pytest.fixture
def host_function_fixture():
    return 1
"""

HOST_TESTS = """
import torch
from hypothesis import given, settings, strategies as st


def test_host_profile_is_untouched():
    assert settings.get_profile("ci").max_examples == 1000
    assert settings.default.max_examples == 1000, settings.default.max_examples


@settings(max_examples=5, deadline=None)
@given(st.integers(1, 4))
def test_given_test_takes_the_plugins_fixtures(bcg_device, bcg_kind, bcg_target, n):
    assert torch.ones(n, device=bcg_device).sum().item() == n


@settings(max_examples=5)
@given(st.integers(1, 4))
def test_control_given_test_with_a_function_scoped_fixture(host_function_fixture, n):
    pass
"""


def test_plugin_leaves_the_host_profile_alone_and_its_fixtures_pass_the_health_check(host):
    host.makeconftest(HOST_CONFTEST)
    host.makepyfile(HOST_TESTS)
    result = _run(host)
    # The control proves the health check is on: only the host's own fixture trips it.
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*uses a function-scoped fixture 'host_function_fixture'*"])


def test_bcg_profile_is_loaded_when_the_user_asks(host):
    host.makeconftest(HOST_CONFTEST)
    host.makepyfile(HOST_TESTS)
    result = _run(host, "--bcg-profile=ci", "-k", "untouched")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*AssertionError: 25*"])


MARKED_TESTS = """
import os
import pytest
from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase


@pytest.mark.gpu
def test_gpu_only():
    pass


@pytest.mark.sim
def test_sim_only(bcg_kind):
    assert bcg_kind == "sim"


def test_shared_database_is_the_default_for_given_tests():
    database = settings.default.database
    assert isinstance(database, DirectoryBasedExampleDatabase)
    assert str(database.path) == os.environ["BCG_HYPOTHESIS_DB"]
"""


def test_markers_skip_with_the_reason_and_the_shared_database_is_used(host, monkeypatch):
    monkeypatch.setenv("BCG_HYPOTHESIS_DB", str(host.path / "shared-db"))
    host.makepyfile(MARKED_TESTS)
    result = _run(host, "--bcg-device=sim", "-rs")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*needs a real CUDA device; this run uses the simulator"])


LEAKING_TESTS = """
import torch

GRAPHS = []  # a capture ends when its graph is collected


def test_a_leaves_a_side_stream_current(bcg_device):
    torch.cuda.set_stream(torch.cuda.Stream())


def test_b_next_test_starts_on_the_default_stream(bcg_device):
    assert torch.cuda.current_stream() == torch.cuda.default_stream()


def test_c_leaves_a_capture_open(bcg_device):
    torch.cuda.set_stream(torch.cuda.Stream())
    GRAPHS.append(torch.cuda.CUDAGraph())
    GRAPHS[-1].capture_begin()
    torch.ones(2, device=bcg_device).mul_(2)
"""


def test_guard_fails_a_test_that_leaves_a_capture_or_a_side_stream_behind(host):
    host.makepyfile(LEAKING_TESTS)
    # On the simulator: a capture left open on a real GPU could take the process down at exit.
    result = _run(host, "--bcg-device=sim")
    result.assert_outcomes(passed=3, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_a_leaves_a_side_stream_current*",
            "*the test left a non-default stream current*",
            "*ERROR at teardown of test_c_leaves_a_capture_open*",
            "*the test left a CUDA graph capture active*",
        ]
    )


SHARD_CONFTEST = """
from hypothesis import settings

settings.register_profile("host", max_examples=110)
settings.load_profile("host")
"""

SHARD_TESTS = """
import json
import os


def test_chunk(bcg_fuzz_chunk):
    with open(os.environ["CHUNK_LOG"], "a") as log:
        chunk = bcg_fuzz_chunk
        log.write(json.dumps([chunk.index, chunk.seed, chunk.examples]) + "\\n")
"""


def test_union_of_shards_is_the_unsharded_run(host, monkeypatch):
    host.makeconftest(SHARD_CONFTEST)
    host.makepyfile(SHARD_TESTS)

    def chunks_run(*args: str) -> list[tuple[int, int, int]]:
        log = host.path / f"chunks{len(list(host.path.glob('chunks*')))}.jsonl"
        monkeypatch.setenv("CHUNK_LOG", str(log))
        result = _run(host, *args)
        assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)
        lines = log.read_text().splitlines() if log.exists() else []
        return [tuple(json.loads(line)) for line in lines]

    whole = chunks_run()
    shards = [chunks_run(f"--bcg-shard={i}/3") for i in range(3)]
    assert sum(examples for _, _, examples in whole) == 110
    assert len(whole) == 5 and all(shards)
    assert sorted(c for shard in shards for c in shard) == sorted(whole)  # disjoint, complete


def test_host_package_named_verification_leaves_the_plugin_inactive_not_broken(host, monkeypatch):
    # The harness's package name is generic; a host package of that name first on sys.path
    # must not fail the host's every pytest run, and the warning says what is in the way.
    shadow = host.path / "shadow" / "verification"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(shadow.parent), os.environ.get("PYTHONPATH", "")])
    )
    host.makepyfile("def test_nothing(): pass")
    result = _run(host)
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.OK, output
    assert "No module named" not in output
    assert f"bcg plugin inactive: the package 'verification' at {shadow}" in output, output


ONE_TEST = """
import sys


def test_one():
    # Loaded and configured, the plugin has imported neither.
    assert "torch" not in sys.modules and "hypothesis" not in sys.modules, sorted(
        m for m in ("torch", "hypothesis") if m in sys.modules
    )
"""


def test_plugin_costs_nothing_until_used_and_says_so_once_it_is(host):
    # Without a bcg option or fixture: no torch, no hypothesis, no header line.
    host.makepyfile(test_one=ONE_TEST)
    quiet = _run(host, "-p", "no:xdist")
    quiet.assert_outcomes(passed=1)
    assert "bcg:" not in quiet.stdout.str()
    # A test using a fixture makes it active: the header comes after collection.
    host.makepyfile(test_two="def test_two(bcg_kind):\n    assert bcg_kind in ('sim', 'cuda')")
    used = _run(host, "-p", "no:xdist", "--bcg-device=sim", "test_two.py")
    used.assert_outcomes(passed=1)
    used.stdout.fnmatch_lines(["bcg: device=sim target=breakable_cudagraph profile=host shard=0/1"])
    fixture_only = _run(host, "-p", "no:xdist", "test_two.py")
    fixture_only.stdout.fnmatch_lines(["collected 1 item", "bcg: device=* target=* shard=0/1"])
    # Control: the same one-test check fails once torch is in (the fixture's test imports it).
    both = _run(host, "-p", "no:xdist", "-p", "no:randomly", "test_two.py", "test_one.py")
    both.assert_outcomes(passed=1, failed=1)


def test_the_plugins_default_target_is_the_harness_default():
    from verification.plugin import hooks as plugin
    from verification.targets import DEFAULT_TARGET

    assert plugin.DEFAULT_TARGET == DEFAULT_TARGET
