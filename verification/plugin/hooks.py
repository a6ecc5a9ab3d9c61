"""Pytest plugin ``bcg`` (``pytest11`` entry point): device, target, shard and profile options,
session-scoped fixtures safe under hypothesis, the ``gpu``/``sim`` markers, one GPU per xdist worker.

It is active only where used: the simulator opens only around tests that use ``bcg_device``;
the ``bcg-*`` hypothesis profiles load only on ``--bcg-profile``, ``BCG_PROFILE`` or ini
``bcg_profile``, never over ``--hypothesis-profile``; workers are pinned to GPUs only with ini
``bcg_gpu_per_worker = true``. Bad options are pytest usage errors (exit 4), never INTERNALERROR.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
import torch
from hypothesis import HealthCheck, settings

from verification.devices import DEVICE_CHOICES, TORCH_DEVICE, device_context
from verification.devices import resolve_device as _resolve_device
from verification.errors import UsageError
from verification.exampledb import shared_database
from verification.plugin.shard import UNSHARDED, FuzzChunk, Shard, parse_shard, plan, select
from verification.plugin.workers import gpu_for_worker, visible_gpus
from verification.profiles import PROFILES, PYTEST_PROFILES
from verification.targets import DEFAULT_TARGET, load_target

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
# Hypothesis profile bcg-NAME runs the examples of verification.profiles' NAME.
HYPOTHESIS_PROFILES = {f"bcg-{name}": PROFILES[name].examples for name in PYTEST_PROFILES}
for _name, _examples in HYPOTHESIS_PROFILES.items():
    # Registering adds names only; nothing is loaded here (see _apply_hypothesis_settings).
    settings.register_profile(
        _name, max_examples=_examples, deadline=None, suppress_health_check=_SLOW_OK
    )

# Marker -> (the device kind it needs, why it is skipped elsewhere).
MARKERS = {
    "gpu": ("cuda", "needs a real CUDA device; this run uses the simulator"),
    "sim": ("sim", "checks the CUDA simulator itself; this run is on a real GPU"),
}
_WORKER_GPU = "bcg_gpu"  # key of the controller's choice in xdist's workerinput
_T = TypeVar("_T")


@dataclass
class _State:
    choice: str
    target: str
    shard: Shard
    profile: str | None
    kind: str | None = None  # resolved on first use: "auto" must not touch CUDA needlessly


_STATE = pytest.StashKey[_State]()


def _usage(call: Callable[..., _T], *args: Any) -> _T:
    try:
        return call(*args)
    except UsageError as error:
        raise pytest.UsageError(str(error)) from None


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("bcg", "breakable CUDA graphs (bcg)")
    group.addoption(
        "--bcg-device",
        default=None,
        help="auto (default, or $BCG_DEVICE): the GPU if torch sees one, else the CUDA "
        "simulator; cuda or sim force one",
    )
    group.addoption(
        "--bcg-target",
        default=DEFAULT_TARGET,
        metavar="MODULE",
        help=f"implementation the property and fuzz tests check (default {DEFAULT_TARGET})",
    )
    group.addoption(
        "--bcg-shard",
        default=str(UNSHARDED),
        metavar="I/N",
        help="run fuzz chunks I mod N only; the N shards together run the unsharded budget",
    )
    group.addoption(
        "--bcg-profile",
        default=None,
        help="load hypothesis profile bcg-ci, bcg-dev or bcg-thorough (short names accepted; "
        "default $BCG_PROFILE, then ini bcg_profile, else the host's own profile)",
    )
    parser.addini("bcg_profile", "bcg profile this project's suite asks for", default="")
    parser.addini(
        "bcg_gpu_per_worker",
        "put pytest-xdist worker i on visible GPU i mod n (via CUDA_VISIBLE_DEVICES)",
        type="bool",
        default=False,
    )


def _profile_name(config: pytest.Config) -> str | None:
    asked = (
        config.getoption("bcg_profile")
        or os.environ.get("BCG_PROFILE")
        or config.getini("bcg_profile")
    )
    if not asked:
        return None
    name = asked if asked.startswith("bcg-") else f"bcg-{asked}"
    if name not in HYPOTHESIS_PROFILES:
        raise pytest.UsageError(
            f"unknown bcg profile {asked!r}; choose one of {', '.join(HYPOTHESIS_PROFILES)}"
        )
    return name


def _device_choice(config: pytest.Config) -> str:
    choice = config.getoption("bcg_device") or os.environ.get("BCG_DEVICE") or "auto"
    if choice not in DEVICE_CHOICES:
        raise pytest.UsageError(
            f"--bcg-device (or BCG_DEVICE) must be one of {', '.join(DEVICE_CHOICES)}, "
            f"got {choice!r}"
        )
    if choice == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError(
            "--bcg-device=cuda was asked for but torch sees no GPU; use --bcg-device=sim"
        )
    return choice


def _kind(config: pytest.Config) -> str:
    state = config.stash[_STATE]
    if state.kind is None:
        state.kind = _usage(_resolve_device, state.choice)
    return state.kind


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    for name, (_, why) in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {why.split(';')[0]}")
    # First of all: on an xdist worker, pick its GPU before anything initialises CUDA.
    # CUDA_VISIBLE_DEVICES rather than torch.cuda.set_device: child processes (the CLI,
    # isolated campaigns) inherit it, "cuda:0" means the worker's GPU, and no worker opens
    # a context on GPU 0 by accident.
    gpu = getattr(config, "workerinput", {}).get(_WORKER_GPU)
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    target = config.getoption("bcg_target")
    state = _State(
        choice=_device_choice(config),
        target=target,
        shard=_usage(parse_shard, config.getoption("bcg_shard")),
        profile=_profile_name(config),
    )
    config.stash[_STATE] = state
    if target != DEFAULT_TARGET:
        _usage(load_target, target)
    if state.choice != "auto" or config.getini("bcg_gpu_per_worker"):
        _kind(config)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist controller: choose the worker's GPU (applied in its pytest_configure)."""
    config = node.config
    if not config.getini("bcg_gpu_per_worker") or _kind(config) != "cuda":
        return
    gpus = visible_gpus(os.environ, torch.cuda.device_count())
    node.workerinput[_WORKER_GPU] = gpu_for_worker(node.workerinput["workerid"], gpus)


def pytest_sessionstart(session: pytest.Session) -> None:
    _apply_hypothesis_settings(session.config)


def _apply_hypothesis_settings(config: pytest.Config) -> None:
    # After every pytest_configure, so hypothesis's own --hypothesis-* options are applied.
    state = config.stash[_STATE]
    if state.profile is not None and not config.getoption("hypothesis_profile", None):
        settings.load_profile(state.profile)
    database = shared_database()
    if database is not None:
        settings.register_profile("bcg-shared-db", settings.default, database=database)
        settings.load_profile("bcg-shared-db")


def pytest_report_header(config: pytest.Config) -> str | None:
    state = config.stash[_STATE]
    if state.kind is None:
        return None
    return (
        f"bcg: device={state.kind} target={state.target} shard={state.shard} "
        f"profile={state.profile or 'host'}"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    marked = [(item, name) for item in items for name in MARKERS if item.get_closest_marker(name)]
    if not marked:
        return
    kind = _kind(config)
    for item, name in marked:
        needs, why = MARKERS[name]
        if kind != needs:
            item.add_marker(pytest.mark.skip(reason=why))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``bcg_fuzz_chunk``: the test runs once per fuzz chunk of this shard (see shard.py)."""
    if "bcg_fuzz_chunk" not in metafunc.fixturenames:
        return
    state = metafunc.config.stash[_STATE]
    chunks: list[FuzzChunk] = select(plan(settings.default.max_examples), state.shard)
    metafunc.parametrize("bcg_fuzz_chunk", chunks, ids=[f"chunk{c.index}" for c in chunks])


@pytest.fixture(scope="session")
def bcg_kind(pytestconfig: pytest.Config) -> str:
    """``"cuda"`` or ``"sim"``: what this run executes on."""
    return _kind(pytestconfig)


@pytest.fixture(scope="session")
def bcg_device(bcg_kind: str) -> str:
    """The torch device to allocate on (``"cuda"``, or ``"cpu"`` under the simulator, which
    is open for the duration of every test that uses this fixture)."""
    return TORCH_DEVICE[bcg_kind]


@pytest.fixture(scope="session")
def bcg_target(pytestconfig: pytest.Config) -> str:
    """Module name of the implementation under test (``--bcg-target``)."""
    return pytestconfig.stash[_STATE].target


@pytest.fixture(scope="session")
def bcg_shard(pytestconfig: pytest.Config) -> Shard:
    """This run's ``--bcg-shard`` (``index``/``count``), for work that should run once per matrix."""
    return pytestconfig.stash[_STATE].shard


@pytest.fixture(autouse=True)
def _bcg_device_scope(request: pytest.FixtureRequest) -> Iterator[None]:
    """Opens the device around tests using ``bcg_device`` (or marked ``gpu``) and fails a
    test that leaves a capture active or a non-default stream current.

    Autouse, so hypothesis's function-scoped-fixture health check does not apply to it.
    """
    if "bcg_device" not in request.fixturenames and request.node.get_closest_marker("gpu") is None:
        yield
        return
    kind = _kind(request.config)
    # A GPU worker's kernels are warm or not by what ran before: tests are not strict.
    with device_context(kind, strict_warmup=False):
        yield
        _fail_unless_clean()
        if kind == "cuda":
            torch.cuda.synchronize()


def _fail_unless_clean() -> None:
    problems = []
    if torch.cuda.is_current_stream_capturing():
        problems.append(
            "a CUDA graph capture active on the current stream "
            "(end it with capture_end() or leave the capture's `with` block)"
        )
    if torch.cuda.current_stream() != torch.cuda.default_stream():
        # Restored so that the next test starts on the default stream.
        torch.cuda.set_stream(torch.cuda.default_stream())
        problems.append(
            "a non-default stream current "
            "(switch with `with torch.cuda.stream(s):`, which restores the previous one)"
        )
    if problems:
        pytest.fail("the test left " + "; ".join(problems), pytrace=False)
