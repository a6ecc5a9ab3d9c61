"""The smallest breakable capture that works: the benchmark's reference for replay and capture.

``MinimalCapture`` records a region as a list of bound ``CUDAGraph.replay`` methods and the
user's eager calls, all segments in one pool on one side stream (its own unless ``stream`` is
given); ``replay()`` calls the list in order. It has no argument holding, no empty-graph
handling, no error recovery: breaks must sit between captured work (never first, last or
adjacent), which the benchmark's programs respect.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch


class MinimalCapture:
    """``with cap: ...; cap.brk(fn, *args); ...`` then ``cap.replay()``."""

    def __init__(self, pool: Any = None, stream: torch.cuda.Stream | None = None) -> None:
        self.pool = pool if pool is not None else torch.cuda.graph_pool_handle()
        self.steps: list[Callable[[], Any]] = []
        self._graph: torch.cuda.CUDAGraph | None = None
        self._stream = stream if stream is not None else torch.cuda.Stream()
        self._context: Any = None

    def _begin(self) -> None:
        self._graph = torch.cuda.CUDAGraph()
        self._graph.capture_begin(pool=self.pool)

    def _end(self) -> None:
        assert self._graph is not None
        self._graph.capture_end()
        self.steps.append(self._graph.replay)
        self._graph = None

    def __enter__(self) -> MinimalCapture:
        self._stream.wait_stream(torch.cuda.current_stream())
        self._context = torch.cuda.stream(self._stream)
        self._context.__enter__()
        self._begin()
        return self

    def __exit__(self, *exc: object) -> None:
        self._end()
        self._context.__exit__(None, None, None)
        torch.cuda.current_stream().wait_stream(self._stream)

    def brk(self, fn: Callable[..., Any], *args: Any) -> None:
        """End the segment, run ``fn(*args)`` now and at every replay, begin the next one."""
        self._end()
        fn(*args)
        self.steps.append(functools.partial(fn, *args))
        self._begin()

    def replay(self) -> None:
        for step in self.steps:
            step()
