"""Root conftest: this suite's use of the ``bcg`` plugin.

Installed, the project registers the plugin through its ``pytest11`` entry point; run from
a checkout (``PYTHONPATH=.``) it is loaded here instead, never twice. The suite asks for the
``bcg-ci`` profile in pyproject's ``bcg_profile``; ``gpu_only`` is the old name of ``gpu``.
Tests marked ``long`` are collected first: xdist hands tests out in collection order, and a
minutes-long test handed out last would run alone after every other test had finished.
"""

import sys

import pytest

pytest_plugins = ["pytester"]
if "verification.plugin" not in sys.modules:
    pytest_plugins.append("verification.plugin")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("gpu_only"):
            item.add_marker(pytest.mark.gpu)
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
