"""One instantiated executable shared by the graph segments of one pool that launch the same
kernels: the same position of the captures of several batch sizes.

A capture that shares (``share_executables``) keeps its graphs uninstantiated
(``CUDAGraph(keep_graph=True)``) and, when it closes, offers each segment to the pool's
executable at that segment's position (:func:`share`): a segment whose kernel functions, in
order, equal the executable's (function identity, not name) and whose graph CUDA accepts as
an update of it (``cudaGraphExecUpdate``: same topology) joins it; any other segment gets an
executable of its own, and a position with none yet gets one from that segment. Launching a
member switches the executable to the member's graph first, unless it already holds it, so
replaying one size over and over pays no update. An update CUDA refuses at launch leaves the
executable as it was and gives the member an executable of its own from then on.

CUDA's graph API comes from ``cuda.bindings.runtime`` (the ``cuda-bindings`` package), looked
up when a capture shares; without it nothing is shared. Segments of a shared executable launch
in launch order: the captures of one pool already replay one at a time.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable
from typing import Any

import torch

from .segments import GRAPH_LOCK

# "1" shares executables in every capture that does not say otherwise.
SHARE_ENV = "BREAKABLE_CUDAGRAPH_SHARE_EXECUTABLES"


NO_RUNTIME = (
    "share_executables=True needs CUDA's graph API from the cuda-bindings package "
    "(pip install cuda-bindings), which is not installed"
)


def sharing(requested: bool | None) -> bool:
    """Whether a capture shares executables: as requested, else as the environment says.
    Asking for it where CUDA's graph API is missing raises."""
    if requested is not None:
        if not isinstance(requested, bool):
            raise TypeError(f"share_executables must be True, False or None, got {requested!r}")
        if requested and runtime() is None:
            raise RuntimeError(NO_RUNTIME)
        return requested
    return os.environ.get(SHARE_ENV, "") == "1"


def runtime() -> Any | None:
    """CUDA's runtime API (``cuda.bindings.runtime``), or None where it is not installed."""
    try:
        return importlib.import_module("cuda.bindings.runtime")
    except ImportError:
        return None


def kernel_signature(graph: torch.cuda.CUDAGraph, cudart: Any) -> tuple[int, ...] | None:
    """Each node's kernel function (a node that is no kernel: minus its type), in CUDA's node
    order; None if CUDA does not tell."""
    handle = cudart.cudaGraph_t(init_value=graph.raw_cuda_graph())
    err, _, count = cudart.cudaGraphGetNodes(handle, 0)
    if err != cudart.cudaError_t.cudaSuccess:
        return None
    err, nodes, count = cudart.cudaGraphGetNodes(handle, count)
    if err != cudart.cudaError_t.cudaSuccess:
        return None
    kernel = cudart.cudaGraphNodeType.cudaGraphNodeTypeKernel
    functions = []
    for node in nodes[:count]:
        err, kind = cudart.cudaGraphNodeGetType(node)
        if err != cudart.cudaError_t.cudaSuccess:
            return None
        if kind != kernel:
            functions.append(-int(kind))
            continue
        err, params = cudart.cudaGraphKernelNodeGetParams(node)
        func = getattr(params, "func", None) if err == cudart.cudaError_t.cudaSuccess else None
        if not func:
            # A kernel launched through the driver API (cuBLAS's) shows no runtime function.
            func = _driver_kernel_function(node)
        if not func:
            return None
        functions.append(int(func))
    return tuple(functions)


def _driver_kernel_function(node: Any) -> int | None:
    try:
        driver = importlib.import_module("cuda.bindings.driver")
    except ImportError:
        return None
    err, params = driver.cuGraphKernelNodeGetParams(driver.CUgraphNode(int(node)))
    if err != driver.CUresult.CUDA_SUCCESS or params is None:
        return None
    return int(params.func) or None


class SharedExecutable:
    """The executable of ``owner``'s graph, serving every member whose graph updates it.

    ``owner`` is instantiated now and kept (its graph and executable) until the last member
    lets go (:meth:`release`); ``current`` is the graph whose parameters the executable holds.
    """

    def __init__(self, owner: torch.cuda.CUDAGraph, signature: tuple[int, ...], cudart: Any):
        owner.instantiate()
        self.owner: torch.cuda.CUDAGraph | None = owner
        self.signature = signature
        self.current: torch.cuda.CUDAGraph | None = owner
        self.members: set[int] = {id(owner)}
        self._cudart = cudart
        self._exec = cudart.cudaGraphExec_t(init_value=owner.raw_cuda_graph_exec())
        # Switch and launch are one step: a member launched from another thread between
        # them would run the other member's parameters.
        self._lock = threading.Lock()

    def _update(self, graph: torch.cuda.CUDAGraph) -> bool:
        cudart = self._cudart
        handle = cudart.cudaGraph_t(init_value=graph.raw_cuda_graph())
        err = cudart.cudaGraphExecUpdate(self._exec, handle)[0]
        if err != cudart.cudaError_t.cudaSuccess:
            return False
        self.current = graph
        return True

    def join(self, graph: torch.cuda.CUDAGraph) -> bool:
        """Whether CUDA takes ``graph`` as an update of the executable (tried, then undone)."""
        with self._lock:
            current = self.current
            if not self._update(graph):
                return False
            if not self._update(current):  # the executable cannot go back: let it be ``graph``'s
                self.current = graph
            self.members.add(id(graph))
            return True

    def launcher(self, graph: torch.cuda.CUDAGraph) -> Callable[[], None]:
        """Launches ``graph``'s work through the shared executable, switching it if needed."""
        owner = self.owner
        own: list[bool] = []  # set once CUDA refused a switch: the member runs on its own

        def launch() -> None:
            if own:
                graph.replay()
                return
            with self._lock:
                if self.current is graph or self._update(graph):
                    owner.replay()
                    return
            with GRAPH_LOCK:
                graph.instantiate()
            own.append(True)
            graph.replay()

        return launch

    def release(self, graph: torch.cuda.CUDAGraph) -> None:
        """``graph`` leaves; the owner's graph and executable go with the last member."""
        self.members.discard(id(graph))
        if graph is not self.owner:
            with GRAPH_LOCK:
                graph.reset()
        if not self.members and self.owner is not None:
            # The graph object goes too, not only its graph: until destroyed it stays
            # registered with the CUDA generators (see segments.GraphSegment.release).
            owner, self.owner, self.current = self.owner, None, None
            with GRAPH_LOCK:
                owner.reset()


def share(
    graphs: list[torch.cuda.CUDAGraph], by_position: dict[int, list[SharedExecutable]]
) -> list[tuple[SharedExecutable | None, Callable[[], None]]]:
    """Each of ``graphs`` (one capture's segments, kept) placed: per graph, the shared
    executable it joined or founded (None: its own executable) and how to launch it.
    ``by_position`` holds the pool's executables at each position and gains the new ones."""
    cudart = runtime()
    placed: list[tuple[SharedExecutable | None, Callable[[], None]]] = []
    for position, graph in enumerate(graphs):
        signature = None if cudart is None else kernel_signature(graph, cudart)
        if signature is None:
            with GRAPH_LOCK:
                graph.instantiate()
            placed.append((None, graph.replay))
            continue
        candidates = [shared for shared in by_position.get(position, ()) if shared.members]
        by_position[position] = candidates
        joined = next(
            (
                shared
                for shared in candidates
                if shared.signature == signature and shared.join(graph)
            ),
            None,
        )
        if joined is None:
            with GRAPH_LOCK:
                joined = SharedExecutable(graph, signature, cudart)
            candidates.append(joined)
        placed.append((joined, joined.launcher(graph)))
    return placed
