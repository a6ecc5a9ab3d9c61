"""Pytest plugin: picks the device every test runs on and registers hypothesis profiles.

``--bcg-device=auto|cuda|sim`` (or ``BCG_DEVICE``): ``auto`` means ``cuda`` when a GPU is
present, else ``sim``. The ``bcg_device`` fixture yields the torch device string tests
must allocate on; under ``sim`` it holds :func:`verification.sim.simulated_cuda` open for
the test. With pytest-xdist each worker takes GPU ``worker_index % device_count``.
Hypothesis profiles ``ci``, ``dev`` and ``thorough`` are chosen by
``--hypothesis-profile`` or ``BCG_PROFILE``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch
from hypothesis import HealthCheck, settings

from verification.devices import device_context, resolve_device

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile("ci", max_examples=25, deadline=None, suppress_health_check=_SLOW_OK)
settings.register_profile("dev", max_examples=200, deadline=None, suppress_health_check=_SLOW_OK)
settings.register_profile(
    "thorough", max_examples=2000, deadline=None, suppress_health_check=_SLOW_OK
)
settings.load_profile(os.environ.get("BCG_PROFILE", "ci"))


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("breakable_cudagraph")
    group.addoption(
        "--bcg-device",
        choices=("auto", "cuda", "sim"),
        default=os.environ.get("BCG_DEVICE", "auto"),
        help="run on a real GPU (cuda), the CUDA simulator (sim), or whichever exists (auto)",
    )


def pytest_configure(config: pytest.Config) -> None:
    kind = resolve_device(config.getoption("--bcg-device"))
    config._bcg_device = kind  # type: ignore[attr-defined]
    if kind == "cuda":
        worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
        index = int(worker[2:]) if worker[2:].isdigit() else 0
        torch.cuda.set_device(index % torch.cuda.device_count())


def pytest_report_header(config: pytest.Config) -> str:
    return f"breakable_cudagraph: device={config._bcg_device}"  # type: ignore[attr-defined]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config._bcg_device == "cuda":  # type: ignore[attr-defined]
        return
    skip = pytest.mark.skip(reason="needs a real CUDA device")
    for item in items:
        if "gpu_only" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def bcg_kind(request: pytest.FixtureRequest) -> str:
    """``"cuda"`` or ``"sim"``: what the suite runs on."""
    return request.config._bcg_device  # type: ignore[attr-defined]


@pytest.fixture
def bcg_device(bcg_kind: str) -> Iterator[str]:
    """The torch device to allocate on; the simulator is active for the test under ``sim``."""
    with device_context(bcg_kind) as device:
        yield device
        if bcg_kind == "cuda":
            torch.cuda.synchronize()
