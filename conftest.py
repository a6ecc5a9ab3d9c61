"""Root conftest: this suite's use of the ``bcg`` plugin.

Installed, the project registers the plugin through its ``pytest11`` entry point; run from
a checkout (``PYTHONPATH=.``) it is loaded here instead, never twice. The suite asks for the
``bcg-ci`` profile in pyproject's ``bcg_profile``; ``gpu_only`` is the old name of ``gpu``.
Tests marked ``long`` (minutes each, in a child process) are spread evenly through the
collection: xdist's ``worksteal`` scheduler (pyproject's addopts) gives each worker a
contiguous run of it, so they start early and on different workers, instead of one worker
running them back to back while the others idle. A test may not leave a thread of its own
running: on a GPU, a thread stuck inside a capture makes every later test of the worker fail
with "operation not permitted when stream is capturing", far from the test that left it.
"""

import sys
import threading
import time
import traceback

import pytest

pytest_plugins = ["pytester"]
if "verification.plugin.hooks" not in sys.modules:
    pytest_plugins.append("verification.plugin.hooks")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("gpu_only"):
            item.add_marker(pytest.mark.gpu)
    long = [item for item in items if item.get_closest_marker("long")]
    rest = [item for item in items if not item.get_closest_marker("long")]
    step = len(items) // max(len(long), 1)
    for index, item in enumerate(long):
        rest.insert(index * step, item)
    items[:] = rest


@pytest.fixture(autouse=True)
def _clean_capture_after_a_failed_one():
    """On a GPU, a test whose capture fails at ``capture_end`` (many do, on purpose) leaves
    torch's default generator in capture mode for the rest of the worker: every later random
    op raises "Offset increment outside graph capture" (tests/sim/test_capture_semantics_h200.py
    shows it). One clean capture clears it, so the next test starts as a fresh process would."""
    yield
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return
    try:
        torch.rand(1, device="cuda")
    except RuntimeError as error:
        if "Offset increment outside graph capture" not in str(error):
            return
        stream = torch.cuda.Stream()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(stream):
            graph.capture_begin()
            graph.capture_end()
        del graph


# How long a test's threads may take to end after it returns (a check joins its own first).
_THREAD_GRACE_S = 5.0


@pytest.fixture(autouse=True)
def _no_thread_left_running():
    before = set(threading.enumerate())
    yield
    left = [t for t in threading.enumerate() if t not in before]
    deadline = time.monotonic() + _THREAD_GRACE_S
    for thread in left:
        thread.join(max(0.0, deadline - time.monotonic()))
    left = [t for t in left if t.is_alive()]
    if left:
        frames = sys._current_frames()
        where = "; ".join(
            f"{t.name!r} at {traceback.format_stack(frames[t.ident])[-1].strip()}"
            for t in left
            if t.ident in frames
        )
        pytest.fail(f"the test left {len(left)} thread(s) running: {where}", pytrace=False)
