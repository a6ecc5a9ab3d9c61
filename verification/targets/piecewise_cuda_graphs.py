"""Adapter: Meta's PyPI package ``piecewise-cuda-graphs`` (``piecewise_graph``,
``CUDAGraphSequence``, ``@no_graph``) seen through the harness's target API, vLLM's names.

``BreakableCUDAGraphCapture`` is a ``CUDAGraphSequence`` captured by a ``piecewise_graph``
context, with the pool, stream and capture error mode passed through as the package takes them;
``eager_break_during_capture`` is ``no_graph``. The package documents that a decorated function
returning any CUDA tensor (nested in a tuple, list or dict too) raises at capture: the adapter
declares ``no-device-returns``, under which that refusal is right. The package names no caller
duties. Without the package, importing this raises :class:`~verification.errors.UsageError`.
"""

from __future__ import annotations

from typing import Any

from verification.targets import upstream

pcg = upstream.require_package(
    "piecewise_cuda_graphs",
    "verification.targets.piecewise_cuda_graphs",
    "pip install --no-deps piecewise-cuda-graphs==0.1.0",
)

__version__ = getattr(pcg, "__version__", None)
BREAK_CONTRACT = "no-device-returns"
eager_break_during_capture = pcg.no_graph


class BreakableCUDAGraphCapture(upstream.WrappedCapture):
    """One piecewise capture; enter it to capture, then :meth:`replay`."""

    _eager = staticmethod(pcg.no_graph)

    def __init__(
        self,
        pool: Any | None = None,
        *,
        stream: Any | None = None,
        capture_error_mode: str = "global",
    ) -> None:
        self._replayable = pcg.CUDAGraphSequence(pool=pool)
        self._stream = stream
        self._mode = capture_error_mode

    @property
    def pool(self) -> Any:
        return self._replayable.pool()

    def _open(self) -> Any:
        return pcg.piecewise_graph(
            self._replayable, stream=self._stream, capture_error_mode=self._mode
        )
