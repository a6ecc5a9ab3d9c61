"""The one simulator session shared by every thread while ``simulated_cuda()`` is active.

``session`` is ``None`` outside the simulator; modules read it through :func:`require`,
which raises a clear error when simulated CUDA is used after the simulator has exited.
"""

from __future__ import annotations

from typing import Any

session: Any = None


def require() -> Any:
    if session is None:
        raise RuntimeError(
            "simulated CUDA used outside the simulator; wrap the code in "
            "`with verification.sim.simulated_cuda():`"
        )
    return session
