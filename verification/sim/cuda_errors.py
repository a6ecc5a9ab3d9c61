"""CUDA's error texts, as torch surfaces them, for the traps the simulator reproduces.

Kept in one table so tests and simulator agree on the exact wording users see on a GPU.
"""

from __future__ import annotations

NOT_PERMITTED = "CUDA error: operation not permitted when stream is capturing"
INVALIDATED = "CUDA error: operation failed due to a previous error during capture"
UNJOINED = "CUDA error: capturing stream has unjoined work"
DEFAULT_STREAM = (
    "CUDA graphs must be captured on a non-default stream. "
    "(However, after capture, it's ok to replay them on the default stream.)"
)
WRONG_END_STREAM = "Capture must end on the same stream it began on."
EMPTY_GRAPH = (
    "The CUDA Graph is empty. This usually means that the graph was attempted to be "
    "captured on wrong device or stream."
)
REPLAY_WITHOUT_CAPTURE = "Called CUDAGraph::replay without a preceding successful capture."
ISOLATION = "CUDA error: dependency created on uncaptured work in another stream"
MERGE = "CUDA error: operation would result in a merge of separate capture sequences"
# capture_begin on a stream that is already capturing. On the H200 (torch 2.11) the CUDAGraph
# left behind aborts the process when freed (bench/probes/failed_capture_begin.py).
BEGIN_IN_CAPTURE = "Cannot register the state during capturing stage."
REPLAY_IN_CAPTURE = "Cannot prepare for replay during capturing stage."
RNG_LEFT_CAPTURING = "Offset increment outside graph capture encountered unexpectedly."
POOL_STILL_RECORDING = "beginAllocateToPool: already recording to mempool_id"
POOL_RELEASED = (
    'it->second->use_count > 0 INTERNAL ASSERT FAILED at "/pytorch/c10/cuda/'
    'CUDACachingAllocator.cpp":2799, please report a bug to PyTorch. '
)
POOL_WITHOUT_CAPTURE = "Called CUDAGraph::pool() without a preceding successful capture."
SEED_IN_CAPTURE = (
    "CUDAGeneratorImpl::set_current_seed can be called during stream capture only if new "
    "seed is the same as the original seed."
)
HOST_COPY = (
    "Cannot copy between CPU and CUDA tensors during CUDA graph capture unless the CPU "
    "tensor is pinned. Please use tensor.pin_memory() or allocate the tensor with "
    "pin_memory=True."
)
# An event recorded during a capture, used after the capture ended (wait, query,
# synchronize, elapsed_time): on the H200 it is a graph node, not an event.
INVALID_ARGUMENT = "CUDA error: invalid argument"
# capture_end() on the stream the graph was made on, with no capture begun.
ILLEGAL_STATE = "CUDA error: the operation cannot be performed in the present state"
ALREADY_CAPTURED = (
    "This CUDAGraph instance already owns a captured graph. "
    "To capture a new graph, create a new instance."
)
# A cuSOLVER op with no library handle yet, issued in a capture: creating the handle fails
# on the H200 and the capture with it. The simulator does not model cuSOLVER itself.
CUSOLVER_IN_CAPTURE = (
    "cusolver error: CUSOLVER_STATUS_INTERNAL_ERROR, when calling `cusolverDnCreate(handle)`"
)
# A kept graph (keep_graph=True) is instantiated only by instantiate() or its first replay
# (H200, torch 2.11).
EXEC_BEFORE_INSTANTIATE = (
    "You cannot access the raw cudaGraphExec_t instance until instantiate() has been called"
)
