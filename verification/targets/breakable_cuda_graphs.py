"""Adapter: the PyPI package ``breakable-cuda-graphs`` seen through the harness's target API.

``BreakableCUDAGraphCapture`` wraps ``bcgs.BreakableCUDAGraph`` + ``bcgs.breakable_graph``;
``eager_break_during_capture`` is ``bcgs.no_graph``, which raises on any CUDA tensor a
decorated function returns (0.1.0 always runs so strict): the adapter declares
``no-device-returns``, under which that refusal is right and no drawn break returns one. Importing it without the package installed raises
:class:`~verification.errors.UsageError`.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any

from verification.errors import UsageError

try:
    import breakable_cuda_graphs as bcgs
except ModuleNotFoundError as error:
    raise UsageError(
        "target verification.targets.breakable_cuda_graphs needs the package: "
        "pip install breakable-cuda-graphs"
    ) from error

__version__ = getattr(bcgs, "__version__", None)
BREAK_CONTRACT = "no-device-returns"
eager_break_during_capture = bcgs.no_graph

_active: list[BreakableCUDAGraphCapture] = []


class BreakableCUDAGraphCapture:
    """One breakable capture; enter it to capture, then :meth:`replay`."""

    def __init__(self, pool: Any | None = None, *, stream: Any | None = None) -> None:
        self._graph = bcgs.BreakableCUDAGraph(pool=pool)
        self._stream = stream
        self._context: Any | None = None

    @property
    def pool(self) -> Any:
        return self._graph.pool()

    @staticmethod
    def current() -> BreakableCUDAGraphCapture | None:
        return _active[-1] if _active else None

    def __enter__(self) -> BreakableCUDAGraphCapture:
        self._context = bcgs.breakable_graph(self._graph, stream=self._stream)
        self._context.__enter__()
        _active.append(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        _active.remove(self)
        context, self._context = self._context, None
        assert context is not None
        return bool(context.__exit__(exc_type, exc, tb))

    def add_eager(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Runs ``fn`` now as an eager break and again at every replay."""
        return bcgs.no_graph(fn)(*args, **kwargs)

    def replay(self) -> None:
        self._graph.replay()

    def reset(self) -> None:
        self._graph.reset()
