"""Simulated ``torch.cuda.CUDAGraph``, ``torch.cuda.graph`` and ``graph_pool_handle``.

A graph owns the steps recorded between ``capture_begin`` and ``capture_end`` and a
reference on its memory pool until ``reset()`` (or deletion). ``replay()`` re-executes
the steps in order against the current contents of the memory they name.
"""

from __future__ import annotations

import gc
import warnings
import weakref
from typing import Any

import torch

from verification.sim import cuda_errors, races, state
from verification.sim.allocator import Pool, PoolId
from verification.sim.capture import CAPTURE_ERROR_MODES, Capture
from verification.sim.recording import Step
from verification.sim.streams import Stream, StreamContext, current_stream

# Raw handles (raw_cuda_graph, raw_cuda_graph_exec) -> the graph, for the simulated graph API.
_HANDLES: weakref.WeakValueDictionary[int, CUDAGraph] = weakref.WeakValueDictionary()


def by_handle(handle: int) -> CUDAGraph | None:
    """The graph a raw graph or executable handle names, while it lives."""
    return _HANDLES.get(handle)


class CUDAGraph:
    def __init__(self, keep_graph: bool = False) -> None:
        self._capture: Capture | None = None
        self._steps: list[Step] | None = None
        # What the executable launches: the steps of the graph last given to
        # cudaGraphExecUpdate (graph_exec_api), else the graph's own.
        self._executable: list[Step] | None = None
        self._pool: Pool | None = None
        self._debug = False
        self._keep_graph = keep_graph
        # torch instantiates at capture_end unless the graph is kept; a kept one at
        # instantiate() or its first replay.
        self._instantiated = False
        # torch's graph takes the current stream as its capture stream until capture_begin.
        self._made_on = current_stream() if state.session is not None else None
        # The session this graph began a capture in (its device generator knows the graph
        # from then on): a graph outliving its session is another process's, to the next.
        self._session: weakref.ref[Any] | None = None

    def capture_begin(self, pool: PoolId | None = None, capture_error_mode: str = "global") -> None:
        session = state.require()
        if capture_error_mode not in CAPTURE_ERROR_MODES:
            raise ValueError(
                f"capture_error_mode must be one of {CAPTURE_ERROR_MODES}, got {capture_error_mode!r}"
            )
        # torch's order: a finished capture, then registering the generator (which refuses
        # a capturing stream), then the default stream.
        if self._steps is not None:
            raise RuntimeError(cuda_errors.ALREADY_CAPTURED)
        stream = current_stream()
        if stream.capture is not None:
            raise RuntimeError(cuda_errors.BEGIN_IN_CAPTURE)
        if self._capture is not None:
            raise RuntimeError("This CUDAGraph already holds a capture; call reset() first.")
        if self._session is None:  # until the graph is destroyed, as torch
            session.rng.register_graph(id(self))
            self._session = weakref.ref(session)
        if stream == session.default_stream:
            raise RuntimeError(cuda_errors.DEFAULT_STREAM)
        session.rng.capture_prologue()  # the generators' capture prologue comes first
        with session.lock:
            capture_pool = session.allocator.capture_pool(pool)
            if capture_pool.still_recording:
                raise RuntimeError(cuda_errors.POOL_STILL_RECORDING)
            if capture_pool.released:
                raise RuntimeError(cuda_errors.POOL_RELEASED)
            self._pool = capture_pool
            self._pool.graph_refs += 1
            self._capture = Capture(stream, self._pool, capture_error_mode)
            session.captures.add(self._capture)

    def capture_end(self) -> None:
        session = state.require()
        capture = self._capture
        if capture is None:
            if current_stream() == self._made_on:
                raise RuntimeError(cuda_errors.ILLEGAL_STATE)  # cudaStreamEndCapture's
            raise RuntimeError(cuda_errors.WRONG_END_STREAM)
        if current_stream() != capture.origin:
            raise RuntimeError(cuda_errors.WRONG_END_STREAM)
        unjoined = capture.unjoined()
        with session.lock:
            capture.finish()
            session.captures.discard(capture)
        self._capture = None
        if capture.invalid or unjoined:
            self._pool.still_recording = True  # type: ignore[union-attr]
            self._release_pool()
            raise RuntimeError(capture.error or cuda_errors.UNJOINED)
        session.rng.capturing = False
        self._steps = capture.steps
        self._instantiated = not self._keep_graph
        if not self._steps:
            warnings.warn(cuda_errors.EMPTY_GRAPH, UserWarning, stacklevel=2)

    def replay(self) -> None:
        if self._steps is None:
            raise RuntimeError(cuda_errors.REPLAY_WITHOUT_CAPTURE)
        if current_stream().capture is not None:
            raise RuntimeError(cuda_errors.REPLAY_IN_CAPTURE)
        self._instantiated = True
        detector = races.detector()
        observe = None
        if detector is not None:
            stream = current_stream()

            def observe(func: Any, args: tuple, kwargs: dict, written: list) -> None:
                detector.op(func, args, kwargs, written, stream, "graph replay")

        with torch.no_grad(), torch._C._DisableTorchDispatch(), state.require().rng.active():
            for step in self.executable_steps():
                step.run(observe)

    def executable_steps(self) -> list[Step]:
        return self._executable if self._executable is not None else self._steps or []

    def update_executable(self, steps: list[Step]) -> None:
        self._executable = steps

    def instantiate(self) -> None:
        # a simulated graph is executable as soon as capture ends; only the handle waits
        self._instantiated = True

    def register_generator_state(self, generator: Any) -> None:
        pass  # every random op draws from the one device generator at replay

    def raw_cuda_graph(self) -> int:
        """A stand-in for the ``cudaGraph_t`` handle: unique while the graph lives."""
        _HANDLES[id(self)] = self
        return id(self)

    def raw_cuda_graph_exec(self) -> int:
        """A stand-in for the ``cudaGraphExec_t`` handle, distinct from the graph's."""
        if not self._instantiated:
            raise RuntimeError(cuda_errors.EXEC_BEFORE_INSTANTIATE)
        _HANDLES[id(self) + 1] = self
        return id(self) + 1

    def enable_debug_mode(self) -> None:
        self._debug = True

    def debug_dump(self, debug_path: str) -> None:
        """Writes the recorded steps, one aten op a line, where CUDA writes a DOT file.

        As on the H200 (torch 2.11, ``bench/probes/debug_dump.py``): only a graph made with
        ``keep_graph=True`` still has a graph to print; any other only warns. Enabling the
        debug mode before or after the capture makes no difference.
        """
        if not self._debug:
            warnings.warn(
                "CUDA Graphs debug not enabled, set with torch._C._cuda_enable_graphs_debug_mode",
                stacklevel=2,
            )
            return
        warnings.warn("DEBUG: calling debug_dump()", UserWarning, stacklevel=2)
        if not self._keep_graph or self._steps is None:
            return
        warnings.warn(
            f"DEBUG: calling cudaGraphDebugDotPrint() with {debug_path}", UserWarning, stacklevel=2
        )
        with open(debug_path, "w", encoding="utf-8") as out:
            out.write("digraph simulated_cuda_graph {\n")
            for i, step in enumerate(self._steps):
                out.write(f'  n{i} [label="{step.func}"];\n')
                if i:
                    out.write(f"  n{i - 1} -> n{i};\n")
            out.write("}\n")

    def _own_session(self) -> Any:
        """The open session this graph was captured in, or None."""
        session = state.session
        if session is None or self._session is None or self._session() is not session:
            return None
        return session

    def reset(self) -> None:
        session = self._own_session()
        if self._steps is not None and session is not None:
            # Destroying a captured graph is a potentially unsafe call. On the H200 (torch
            # 2.11, bench/probes/reset_during_capture.py) it only warns, and every capture
            # that forbids it, the calling stream's own included, fails at its next op. The
            # cyclic collector freeing an old graph mid-capture does the same.
            broken = [
                capture
                for capture in session.captures_forbidding_unsafe_calls()
                if capture.active and capture is not self._capture
            ]
            if broken:
                warnings.warn(
                    cuda_errors.NOT_PERMITTED.replace("CUDA error", "CUDA warning"), stacklevel=2
                )
            for capture in broken:
                capture.invalidate()
        if self._capture is not None:
            self._capture.finish()
            if state.session is not None:
                state.session.captures.discard(self._capture)
            self._capture = None
        self._steps = None
        self._executable = None
        self._instantiated = False
        self._release_pool()

    def pool(self) -> PoolId:
        if self._pool is None or self._steps is None:
            raise RuntimeError(cuda_errors.POOL_WITHOUT_CAPTURE)
        return self._pool.id

    def _release_pool(self) -> None:
        if self._pool is not None:
            self._pool.graph_refs -= 1
            self._pool.released = self._pool.graph_refs == 0
            self._pool = None

    def __del__(self) -> None:
        try:
            session = self._own_session()
            if session is not None:
                session.rng.unregister_graph(id(self))
            self.reset()
        except Exception:
            pass  # interpreter shutdown: nothing left to release


def graph_pool_handle() -> PoolId:
    return state.require().allocator.new_handle()


class graph:  # lower-case to mirror torch.cuda.graph
    """``with torch.cuda.graph(g):`` captures the block into ``g`` on a side stream.

    Like torch 2.11, entering collects no garbage unless ``force_cudagraph_gc`` is set: a
    tensor held only by a reference cycle is still alive inside the capture.
    """

    default_capture_stream: Stream | None = None  # made on first use, as in torch

    def __init__(
        self,
        cuda_graph: CUDAGraph,
        pool: PoolId | None = None,
        stream: Stream | None = None,
        capture_error_mode: str = "global",
    ) -> None:
        if stream is None and type(self).default_capture_stream is None:
            type(self).default_capture_stream = Stream()
        self.cuda_graph = cuda_graph
        self.pool = pool
        self.capture_error_mode = capture_error_mode
        self.capture_stream = stream if stream is not None else type(self).default_capture_stream
        self.stream_ctx = StreamContext(self.capture_stream)

    def __enter__(self) -> None:
        torch.cuda.synchronize()
        if getattr(torch.compiler.config, "force_cudagraph_gc", False):
            gc.collect()
        torch.cuda.empty_cache()
        self.stream_ctx.__enter__()
        self.cuda_graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode)

    def __exit__(self, *exc: Any) -> None:
        # Like torch: if capture_end raises, the capture stream stays current.
        self.cuda_graph.capture_end()
        self.stream_ctx.__exit__(*exc)
