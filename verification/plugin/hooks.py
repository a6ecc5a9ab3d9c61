"""Pytest plugin ``bcg`` (``pytest11`` entry point): device, target, shard and profile options,
session-scoped fixtures safe under hypothesis, the ``gpu``/``sim`` markers, one GPU per xdist worker.

It costs nothing until used: loading it imports neither torch nor hypothesis, which come in
only for a test that uses its fixtures or markers, or a run given one of its options,
``BCG_*`` variables or ini keys; such a run prints a ``bcg:`` header line. The ``bcg-*``
hypothesis profiles load only on request, never over ``--hypothesis-profile``. Bad options are
pytest usage errors (exit 4) naming the option as the user gave it, never INTERNALERROR.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

# None of these imports torch or hypothesis: everything that does is imported where used.
from verification.devices import DEVICE_CHOICES, TORCH_DEVICE, DeviceKind
from verification.errors import UsageError
from verification.plugin.profiles import PROFILE_MEANINGS, PROFILES, PYTEST_PROFILES
from verification.plugin.shard import UNSHARDED, FuzzChunk, Shard, parse_shard

# verification.targets.DEFAULT_TARGET, written out because importing that package pulls in
# the target machinery; tests/plugin/test_host_project.py checks that the two agree.
DEFAULT_TARGET = "breakable_cudagraph"
# Hypothesis profile bcg-NAME runs the examples of verification.plugin.profiles' NAME.
HYPOTHESIS_PROFILES = {f"bcg-{name}": PROFILES[name].examples for name in PYTEST_PROFILES}

# Marker -> (the device kind it needs, why it is skipped elsewhere).
MARKERS = {
    "gpu": ("cuda", "needs a real CUDA device; this run uses the simulator"),
    "sim": ("sim", "checks the CUDA simulator itself; this run is on a real GPU"),
}
# A test using one of these (or a marker above) makes the plugin active.
FIXTURES = ("bcg_device", "bcg_kind", "bcg_target", "bcg_shard", "bcg_fuzz_chunk")
_WORKER_GPU = "bcg_gpu"  # key of the controller's choice in xdist's workerinput
_T = TypeVar("_T")


@dataclass
class _State:
    device_choice: str  # auto, cuda or sim, as the user gave it
    device_choice_from: str  # how the user gave it (the option or the variable), for errors
    target: str
    shard: Shard
    profile: str | None
    asked: bool  # an option, BCG_* variable or ini key of the plugin was given
    # The device choice resolved, once: "auto" on first use, as it must not touch CUDA needlessly.
    kind: DeviceKind | None = None
    header_shown: bool = False
    database: Any = None  # BCG_HYPOTHESIS_DB's hypothesis ExampleDatabase, checked at configure


_STATE = pytest.StashKey[_State]()


def _usage(call: Callable[..., _T], *args: Any, option: str | None) -> _T:
    """``call(*args)``, its UsageError made pytest's, prefixed with the option it is about."""
    try:
        return call(*args)
    except UsageError as error:
        raise pytest.UsageError(f"{option}: {error}" if option else str(error)) from None


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("bcg", "breakable CUDA graphs (bcg)")
    group.addoption(
        "--bcg-device",
        default=None,
        help="where tests using bcg_device run: auto (the GPU if torch sees one, else the CUDA "
        "simulator), cuda or sim (default: $BCG_DEVICE, else auto)",
    )
    group.addoption(
        "--bcg-target",
        default=None,
        metavar="MODULE",
        help=f"importable module the property and fuzz tests check (default: {DEFAULT_TARGET})",
    )
    group.addoption(
        "--bcg-shard",
        default=None,
        metavar="I/N",
        help="run fuzz chunks I mod N only; the N shards together run the unsharded budget "
        f"(default: {UNSHARDED}, every chunk)",
    )
    meanings = "; ".join(
        f"{name}: {PROFILES[name].examples} examples, {PROFILE_MEANINGS[name]}"
        for name in PYTEST_PROFILES
    )
    group.addoption(
        "--bcg-profile",
        default=None,
        metavar="NAME",
        help=f"load hypothesis profile bcg-NAME ({meanings}) (default: $BCG_PROFILE, then ini "
        "bcg_profile, else the host's own profile)",
    )
    parser.addini("bcg_profile", "bcg profile this project's suite asks for", default="")
    parser.addini(
        "bcg_gpu_per_worker",
        "put pytest-xdist worker i on visible GPU i mod n (via CUDA_VISIBLE_DEVICES)",
        type="bool",
        default=False,
    )


def _profile_name(config: pytest.Config) -> str | None:
    given = [
        ("--bcg-profile", config.getoption("bcg_profile")),
        ("BCG_PROFILE", os.environ.get("BCG_PROFILE")),
        ("ini bcg_profile", config.getini("bcg_profile")),
    ]
    source, asked = next(((s, v) for s, v in given if v), ("", None))
    if not asked:
        return None
    name = asked if asked.startswith("bcg-") else f"bcg-{asked}"
    if name not in HYPOTHESIS_PROFILES:
        short = ", ".join(PYTEST_PROFILES)
        raise pytest.UsageError(f"{source}: unknown bcg profile {asked!r}; choose one of {short}")
    return name


def _device_choice(config: pytest.Config) -> tuple[str, str]:
    """The device asked for, and how it was asked (the option or the variable)."""
    if config.getoption("bcg_device"):
        choice, source = config.getoption("bcg_device"), "--bcg-device"
    elif os.environ.get("BCG_DEVICE"):
        choice, source = os.environ["BCG_DEVICE"], "BCG_DEVICE"
    else:
        return "auto", ""
    if choice not in DEVICE_CHOICES:
        raise pytest.UsageError(f"{source}={choice}: must be one of {', '.join(DEVICE_CHOICES)}")
    return choice, source


def _resolve(device_choice: str, source: str) -> DeviceKind:
    """The kind that runs for a valid ``device_choice``, which fails only as cuda on a host
    without a GPU: said in the words of the option or variable that asked for it."""
    from verification.devices import resolve_kind

    try:
        return resolve_kind(device_choice)
    except UsageError:
        raise pytest.UsageError(
            f"{source}=cuda: torch sees no GPU here; use {source}=sim for the simulator"
        ) from None


def _kind(config: pytest.Config) -> DeviceKind:
    state = config.stash[_STATE]
    if state.kind is None:
        state.kind = _resolve(state.device_choice, state.device_choice_from)
    return state.kind


def _register_profiles() -> None:
    from hypothesis import HealthCheck, settings

    slow_ok = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
    for name, examples in HYPOTHESIS_PROFILES.items():
        settings.register_profile(
            name, max_examples=examples, deadline=None, suppress_health_check=slow_ok
        )


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
    shard = config.getoption("bcg_shard")
    device_choice, device_choice_from = _device_choice(config)
    # A device asked for is resolved at once, so that a missing GPU is the first error;
    # auto waits for its first use.
    kind = None if device_choice == "auto" else _resolve(device_choice, device_choice_from)
    state = _State(
        device_choice=device_choice,
        device_choice_from=device_choice_from,
        target=DEFAULT_TARGET if target is None else target,
        shard=UNSHARDED if shard is None else _usage(parse_shard, shard, option=None),
        profile=_profile_name(config),
        asked=bool(
            device_choice_from
            or target is not None
            or shard is not None
            or config.getini("bcg_gpu_per_worker")
            or os.environ.get("BCG_HYPOTHESIS_DB")
        ),
        kind=kind,
    )
    state.asked = state.asked or state.profile is not None
    config.stash[_STATE] = state
    # hypothesis's own plugin loads --hypothesis-profile in its pytest_configure, after this
    # tryfirst one: a bcg-* name must be registered by then.
    hypothesis_profile = config.getoption("hypothesis_profile", None) or ""
    if state.profile is not None or hypothesis_profile.startswith("bcg-"):
        _register_profiles()
    if os.environ.get("BCG_HYPOTHESIS_DB"):
        from verification.exampledb import shared_database

        # Its errors name the variable and its value already.
        state.database = _usage(shared_database, option=None)
    if target is not None:
        from verification.targets import load_target

        _usage(load_target, state.target, option=f"--bcg-target={target}")
    if config.getini("bcg_gpu_per_worker"):
        _kind(config)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist controller: choose the worker's GPU (applied in its pytest_configure)."""
    config = node.config
    if not config.getini("bcg_gpu_per_worker") or _kind(config) != "cuda":
        return
    import torch

    from verification.plugin.workers import gpu_for_worker, visible_gpus

    gpus = visible_gpus(os.environ, torch.cuda.device_count())
    node.workerinput[_WORKER_GPU] = gpu_for_worker(node.workerinput["workerid"], gpus)


def pytest_sessionstart(session: pytest.Session) -> None:
    # After every pytest_configure, so hypothesis's own --hypothesis-* options are applied.
    config = session.config
    state = config.stash[_STATE]
    if state.profile is not None and not config.getoption("hypothesis_profile", None):
        from hypothesis import settings

        settings.load_profile(state.profile)
    if state.database is not None:
        from hypothesis import settings

        settings.register_profile("bcg-shared-db", settings.default, database=state.database)
        settings.load_profile("bcg-shared-db")


def _header(config: pytest.Config) -> str:
    state = config.stash[_STATE]
    state.header_shown = True
    return (
        f"bcg: device={_kind(config)} target={state.target} "
        f"profile={state.profile or 'host'} shard={state.shard}"
    )


def pytest_report_header(config: pytest.Config) -> str | None:
    return _header(config) if config.stash[_STATE].asked else None


def _uses_plugin(item: pytest.Item) -> bool:
    names = getattr(item, "fixturenames", ())
    return any(n in names for n in FIXTURES) or any(item.get_closest_marker(m) for m in MARKERS)


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> str | None:
    # Asked through no option, the plugin is active only if a test uses it: known only now.
    state = config.stash[_STATE]
    if state.header_shown or config.get_verbosity() < 0 or not any(map(_uses_plugin, items)):
        return None
    return _header(config)


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
    from hypothesis import settings

    from verification.plugin.shard import plan, select

    state = metafunc.config.stash[_STATE]
    chunks: list[FuzzChunk] = select(plan(settings.default.max_examples), state.shard)
    metafunc.parametrize("bcg_fuzz_chunk", chunks, ids=[f"chunk{c.index}" for c in chunks])


@pytest.fixture(scope="session")
def bcg_kind(pytestconfig: pytest.Config) -> DeviceKind:
    """``"cuda"`` or ``"sim"``: what this run executes on."""
    return _kind(pytestconfig)


@pytest.fixture(scope="session")
def bcg_device(bcg_kind: DeviceKind) -> str:
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
    import torch

    from verification.devices import device_context

    kind = _kind(request.config)
    # A GPU worker's kernels are warm or not by what ran before: tests are not strict.
    with device_context(kind, strict_warmup=False):
        yield
        _fail_unless_clean()
        if kind == "cuda":
            torch.cuda.synchronize()


def _fail_unless_clean() -> None:
    import torch

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
