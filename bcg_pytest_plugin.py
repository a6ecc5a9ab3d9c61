"""Entry point of the ``bcg`` pytest plugin: registers ``verification.plugin.hooks`` of this distribution.

The harness's package is called ``verification``, a name a project under test may use for a
package of its own. When that package comes first on ``sys.path`` it shadows ours; the plugin
then stays inactive, with one warning naming the package in the way, instead of failing every
pytest run of that project with ``No module named 'verification.plugin.hooks'``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent  # site-packages, or the checkout


def _harness_origin() -> str | None:
    """Where ``import verification`` would load from, or None if it would not load at all."""
    try:
        spec = importlib.util.find_spec("verification")
    except (ImportError, ValueError):
        return None
    return None if spec is None or spec.origin is None else spec.origin


_ORIGIN = _harness_origin()
_OURS = _ORIGIN is not None and Path(_ORIGIN).resolve().parent.parent == _HERE

# pytest imports and registers what a plugin module lists here (consider_module).
pytest_plugins = ["verification.plugin.hooks"] if _OURS else []


def pytest_configure(config: Any) -> None:
    if _OURS:
        return
    import pytest

    where = _ORIGIN or "nowhere on sys.path"
    config.issue_config_time_warning(
        pytest.PytestConfigWarning(
            f"bcg plugin inactive: the package 'verification' at {where} is not "
            f"breakable-cudagraph's harness (expected under {_HERE}); rename that package or "
            "put breakable-cudagraph first on sys.path"
        ),
        stacklevel=2,
    )
