"""A simulated ``cuda.bindings.runtime``: the part of CUDA's graph API that sharing one
executable between captured graphs uses, over the simulator's graphs.

A graph's nodes are its recorded steps, in order; each is a kernel node whose function stands
for the op and, for matrix products, for the size class of its rows (cuBLAS picks its kernel
by shape, so captures of several batch sizes launch other functions at one place).
``cudaGraphExecUpdate`` accepts a graph whose nodes launch the same functions in the same order
and then runs that graph's steps, with their arguments, at the executable's next launch; any
other graph is refused with ``cudaErrorGraphExecUpdateFailure``, leaving the executable as it
was. Handles are ``CUDAGraph.raw_cuda_graph()`` and ``raw_cuda_graph_exec()``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import torch

from verification.sim import graph as sim_graph
from verification.sim.recording import BlockRef, HeldRef


class cudaError_t(enum.IntEnum):
    cudaSuccess = 0
    cudaErrorInvalidValue = 1
    cudaErrorGraphExecUpdateFailure = 910


class cudaGraphNodeType(enum.IntEnum):
    cudaGraphNodeTypeKernel = 0
    cudaGraphNodeTypeMemcpy = 1


class _Handle:
    def __init__(self, init_value: int = 0) -> None:
        self._value = int(init_value)

    def __int__(self) -> int:
        return self._value

    def getPtr(self) -> int:
        return self._value


class cudaGraph_t(_Handle):
    pass


class cudaGraphExec_t(_Handle):
    pass


@dataclass(frozen=True)
class cudaGraphNode_t:
    graph: Any
    index: int

    def __int__(self) -> int:
        return id(self.graph) * 4096 + self.index


@dataclass(frozen=True)
class cudaKernelNodeParams:
    func: int


# Matrix products whose kernel cuBLAS picks by shape: a function per size class of the rows.
_BY_SHAPE = frozenset(
    {
        torch.ops.aten.mm.default,
        torch.ops.aten.addmm.default,
        torch.ops.aten.bmm.default,
        torch.ops.aten.baddbmm.default,
    }
)
_ROWS_PER_CLASS = 2


def kernel_function(step: Any) -> int:
    """The function a step's kernel stands for (see the module's docstring)."""
    func = step.func
    if func not in _BY_SHAPE:
        return id(func) * 64
    rows = next(
        (leaf.size[0] if isinstance(leaf, BlockRef) else leaf.held.shape[0])
        for leaf in step.leaves
        if isinstance(leaf, (BlockRef, HeldRef))
        and (leaf.size if isinstance(leaf, BlockRef) else leaf.held.shape)
    )
    return id(func) * 64 + min(rows // _ROWS_PER_CLASS, 63)


def _graph(handle: Any) -> Any:
    return sim_graph.by_handle(int(handle))


def cudaGraphGetNodes(graph: Any, numNodes: int = 0) -> tuple[Any, ...]:
    found = _graph(graph)
    if found is None or found._steps is None:
        return (cudaError_t.cudaErrorInvalidValue, None, 0)
    count = len(found._steps)
    if not numNodes:
        return (cudaError_t.cudaSuccess, None, count)
    nodes = [cudaGraphNode_t(found, i) for i in range(min(numNodes, count))]
    return (cudaError_t.cudaSuccess, nodes, count)


def cudaGraphNodeGetType(node: cudaGraphNode_t) -> tuple[Any, ...]:
    return (cudaError_t.cudaSuccess, cudaGraphNodeType.cudaGraphNodeTypeKernel)


def cudaGraphKernelNodeGetParams(node: cudaGraphNode_t) -> tuple[Any, ...]:
    steps = node.graph._steps
    if steps is None or node.index >= len(steps):
        return (cudaError_t.cudaErrorInvalidValue, None)
    return (cudaError_t.cudaSuccess, cudaKernelNodeParams(kernel_function(steps[node.index])))


def cudaGraphExecUpdate(hGraphExec: Any, hGraph: Any) -> tuple[Any, ...]:
    executable = sim_graph.by_handle(int(hGraphExec))
    source = _graph(hGraph)
    if executable is None or source is None or source._steps is None:
        return (cudaError_t.cudaErrorInvalidValue, None)
    running = executable.executable_steps()
    if [kernel_function(s) for s in running] != [kernel_function(s) for s in source._steps]:
        return (cudaError_t.cudaErrorGraphExecUpdateFailure, None)
    executable.update_executable(source._steps)
    return (cudaError_t.cudaSuccess, None)
