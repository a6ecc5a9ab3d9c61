"""The disable switch: decides, at call time, whether captures record CUDA graphs or run eagerly.

An explicit ``enabled=True/False`` wins; with ``enabled=None`` the environment variable
``BREAKABLE_CUDAGRAPH_DISABLE`` (``1``/``true``/``yes``/``on``) disables graphs. The variable is
read at every decision, never cached at import, so it can be flipped while a process runs.
"""

from __future__ import annotations

import os

DISABLE_ENV_VAR = "BREAKABLE_CUDAGRAPH_DISABLE"
_TRUTHY = frozenset({"1", "true", "yes", "on"})


def graphs_disabled(enabled: bool | None = None) -> bool:
    """True when work should run eagerly instead of being captured into CUDA graphs."""
    if enabled is not None:
        return not enabled
    return os.environ.get(DISABLE_ENV_VAR, "").strip().lower() in _TRUTHY
