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

import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

from verification.errors import UsageError

try:
    import piecewise_cuda_graphs as pcg
except ModuleNotFoundError as error:
    raise UsageError(
        "target verification.targets.piecewise_cuda_graphs needs the package: "
        "pip install --no-deps piecewise-cuda-graphs==0.1.0"
    ) from error

__version__ = getattr(pcg, "__version__", None)
BREAK_CONTRACT = "no-device-returns"
eager_break_during_capture = pcg.no_graph

# The package keeps its open capture in a context variable, which is per thread; the adapter's
# own record of the open capture object is per thread too, so that it adds no shared state.
_open = threading.local()


class BreakableCUDAGraphCapture:
    """One piecewise capture; enter it to capture, then :meth:`replay`."""

    def __init__(
        self,
        pool: Any | None = None,
        *,
        stream: Any | None = None,
        capture_error_mode: str = "global",
    ) -> None:
        self._sequence = pcg.CUDAGraphSequence(pool=pool)
        self._stream = stream
        self._mode = capture_error_mode
        self._context: Any | None = None

    @property
    def pool(self) -> Any:
        return self._sequence.pool()

    @staticmethod
    def current() -> BreakableCUDAGraphCapture | None:
        stack = getattr(_open, "stack", [])
        return stack[-1] if stack else None

    def __enter__(self) -> BreakableCUDAGraphCapture:
        context = pcg.piecewise_graph(
            self._sequence, stream=self._stream, capture_error_mode=self._mode
        )
        context.__enter__()
        self._context = context
        _open.__dict__.setdefault("stack", []).append(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        _open.stack.remove(self)
        context, self._context = self._context, None
        assert context is not None
        return bool(context.__exit__(exc_type, exc, tb))

    def add_eager(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Runs ``fn`` now as an eager break and again at every replay."""
        return pcg.no_graph(fn)(*args, **kwargs)

    def replay(self) -> None:
        self._sequence.replay()

    def reset(self) -> None:
        self._sequence.reset()
