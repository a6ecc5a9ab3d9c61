"""Adapter: the PyPI package ``breakable-cuda-graphs`` seen through the harness's target API.

``BreakableCUDAGraphCapture`` wraps ``bcgs.BreakableCUDAGraph`` + ``bcgs.breakable_graph``;
``eager_break_during_capture`` is ``bcgs.no_graph``, which raises on any CUDA tensor a
decorated function returns (0.1.0 always runs so strict): the adapter declares
``no-device-returns``, under which that refusal is right and no drawn break returns one.
Importing it without the package installed raises :class:`~verification.errors.UsageError`.
"""

from __future__ import annotations

from typing import Any

from verification.targets import upstream

bcgs = upstream.require_package(
    "breakable_cuda_graphs",
    "verification.targets.breakable_cuda_graphs",
    "pip install breakable-cuda-graphs",
)

__version__ = getattr(bcgs, "__version__", None)
BREAK_CONTRACT = "no-device-returns"
eager_break_during_capture = bcgs.no_graph


class BreakableCUDAGraphCapture(upstream.WrappedCapture):
    """One breakable capture; enter it to capture, then :meth:`replay`."""

    _eager = staticmethod(bcgs.no_graph)

    def __init__(self, pool: Any | None = None, *, stream: Any | None = None) -> None:
        self._replayable = bcgs.BreakableCUDAGraph(pool=pool)
        self._stream = stream

    @property
    def pool(self) -> Any:
        return self._replayable.pool()

    def _open(self) -> Any:
        return bcgs.breakable_graph(self._replayable, stream=self._stream)
