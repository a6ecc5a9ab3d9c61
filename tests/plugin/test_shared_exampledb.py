"""``BCG_HYPOTHESIS_DB=redis://HOST:PORT/N``: a failure one CI runner finds is replayed first by
another, through a real ``redis-server`` on a loopback port; a value that cannot serve as a
database is a pytest usage error (exit 4) naming the variable.

The runners are two ``pytest`` processes in separate directories, sharing only the URL. Where
``redis-server`` (Debian's ``redis-server``) or the ``redis`` client is missing the Redis tests
skip, except under CI (``CI`` set), where ``.ci/run`` installs both and a skip would hide them.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.child_env import child_env

ROOT = Path(__file__).resolve().parents[2]
_TIMEOUT = 300


def _require(available: bool, what: str) -> None:
    if available:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{what} is missing; .ci/run installs it and CI must run this test")
    pytest.skip(f"{what} is not installed here")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A fresh ``redis-server`` on a loopback port, without persistence, stopped afterwards."""
    _require(
        shutil.which("redis-server") is not None, "redis-server (apt-get install redis-server)"
    )
    _require(importlib.util.find_spec("redis") is not None, "the redis client (the redis extra)")
    import redis

    port = _free_port()
    server = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
         "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        client = redis.Redis(host="127.0.0.1", port=port)
        deadline = time.monotonic() + 30
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"redis-server did not start on port {port}")
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


RARE_FAILURE = """
import os

from hypothesis import given, settings, strategies as st


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**6))
def test_rare(n):
    with open(os.environ["TRIED_LOG"], "a") as log:
        log.write(f"{n}\\n")
    assert n < 1000
"""


def _plugin_args() -> list[str]:
    # As tests/plugin/test_host_project.py: name the plugin only where no entry point registers it.
    eps = importlib.metadata.entry_points(group="pytest11")
    return [] if any(ep.name == "bcg" for ep in eps) else ["-p", "bcg_pytest_plugin"]


def _runner(workdir: Path, database: str, *args: str) -> tuple[subprocess.CompletedProcess, list]:
    """One CI runner: pytest on its own copy of the project; the values its test tried."""
    workdir.mkdir()
    (workdir / "test_rare.py").write_text(RARE_FAILURE)
    log = workdir / "tried.txt"
    env = child_env() | {"BCG_HYPOTHESIS_DB": database, "TRIED_LOG": str(log)}
    for name in ("BCG_PROFILE", "BCG_DEVICE", "PYTEST_ADDOPTS"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *_plugin_args(), "-p", "no:cacheprovider",
         "-p", "no:xdist", "-q", *args],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=_TIMEOUT,
    )  # fmt: skip
    tried = [int(line) for line in log.read_text().split()] if log.exists() else []
    return done, tried


def test_a_failure_found_on_one_runner_is_replayed_first_on_another(redis_url, tmp_path):
    found, tried_a = _runner(tmp_path / "runner-a", f"{redis_url}/0")
    assert found.returncode == pytest.ExitCode.TESTS_FAILED, found.stdout + found.stderr
    minimal = tried_a[-1]  # hypothesis ends by re-running the shrunk failure
    assert minimal == 1000, tried_a[-5:]

    replayed, tried_b = _runner(tmp_path / "runner-b", f"{redis_url}/0")
    assert replayed.returncode == pytest.ExitCode.TESTS_FAILED, replayed.stdout + replayed.stderr
    assert tried_b[0] == minimal, tried_b[:5]
    # Control: a runner on another database of the same server starts elsewhere, so it is
    # the shared database, not a deterministic search, that put the failure first.
    _, tried_c = _runner(tmp_path / "runner-c", f"{redis_url}/1")
    assert tried_c and tried_c[0] != minimal, tried_c[:5]


def test_an_unreachable_redis_server_is_a_usage_error(tmp_path):
    _require(importlib.util.find_spec("redis") is not None, "the redis client (the redis extra)")
    url = f"redis://127.0.0.1:{_free_port()}/0"  # nothing listens there
    done, tried = _runner(tmp_path / "runner", url)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "INTERNALERROR" not in done.stdout + done.stderr
    assert f"ERROR: BCG_HYPOTHESIS_DB={url}: cannot reach the Redis server" in done.stderr
    assert not tried


def test_a_url_of_another_scheme_is_a_usage_error_and_a_directory_still_works(tmp_path):
    done, _ = _runner(tmp_path / "runner-url", "http://127.0.0.1/0")
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert "ERROR: BCG_HYPOTHESIS_DB=http://127.0.0.1/0: not a directory nor a redis" in done.stderr
    shared = tmp_path / "shared-db"
    found, tried_a = _runner(tmp_path / "runner-a", str(shared))
    replayed, tried_b = _runner(tmp_path / "runner-b", str(shared))
    assert found.returncode == replayed.returncode == pytest.ExitCode.TESTS_FAILED
    assert tried_b[0] == tried_a[-1] == 1000
