"""Simulated streams and events, and each thread's current stream.

Work runs synchronously in issue order, so streams carry no queues: what they carry is
capture membership. A stream joins a capture when it waits on an event (or stream) of
that capture; the capture's vector clocks decide whether every fork was joined back.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import torch

from verification.sim import cuda_errors, state

_stream_ids = itertools.count(1)
_thread = threading.local()


# torch keeps stream pools for this many priorities (0 down to -3); requests clamp to them.
PRIORITY_RANGE = (0, -5)
_LOWEST_POOL_PRIORITY = -3


class _StreamState:
    """What every handle of one stream shares."""

    __slots__ = ("capture", "priority", "stream_id")

    def __init__(self, stream_id: int, priority: int) -> None:
        self.stream_id = stream_id
        self.priority = priority
        self.capture: Any = None


class Stream:
    """A simulated ``torch.cuda.Stream``; ``capture`` is the capture it belongs to, if any.

    Like torch, ``current_stream()`` returns a new handle per call: handles of one stream
    are equal (``==``) and share its state, but are not the same object.
    """

    def __init__(self, device: Any = None, priority: int = 0) -> None:
        clamped = min(0, max(_LOWEST_POOL_PRIORITY, int(priority)))
        self._state = _StreamState(next(_stream_ids), clamped)

    @classmethod
    def _default(cls) -> Stream:
        stream = object.__new__(cls)
        stream._state = _StreamState(0, 0)  # the default stream's handle is 0, as on CUDA
        return stream

    def _handle(self) -> Stream:
        stream = object.__new__(type(self))
        stream._state = self._state
        return stream

    @property
    def stream_id(self) -> int:
        return self._state.stream_id

    @property
    def priority(self) -> int:
        return self._state.priority

    @property
    def capture(self) -> Any:
        return self._state.capture

    @capture.setter
    def capture(self, value: Any) -> None:
        self._state.capture = value

    @staticmethod
    def priority_range() -> tuple[int, int]:
        return PRIORITY_RANGE

    @property
    def cuda_stream(self) -> int:
        return self.stream_id

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", 0)

    device_index = 0
    device_type = 1  # DeviceType.CUDA, as torch.Stream reports it

    def wait_event(self, event: Event) -> None:
        event.wait(self)

    def wait_stream(self, stream: Stream) -> None:
        self.wait_event(stream.record_event())

    def record_event(self, event: Event | None = None) -> Event:
        event = Event() if event is None else event
        event.record(self)
        return event

    def synchronize(self) -> None:
        check_host_sync(self.capture)
        races = state.require().races
        if races is not None:
            races.host_waits_for_stream(self)

    def query(self) -> bool:
        check_host_sync(self.capture)
        return True

    # Through ``_state``, not the property: a capture keys its clocks by stream, so every
    # captured op hashes and compares handles several times.
    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other._state.stream_id == self._state.stream_id

    def __hash__(self) -> int:
        return hash(("sim-stream", self._state.stream_id))

    def __repr__(self) -> str:
        return f"<simulated torch.cuda.Stream device=cuda:0 cuda_stream={self.stream_id:#x}>"

    def __enter__(self) -> Stream:
        self._ctx = stream(self)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._ctx.__exit__(*exc)


class Event:
    """A simulated ``torch.cuda.Event``: remembers where (and in which capture) it was recorded.

    An event recorded during a capture is a node of that graph: once the capture ends, the
    H200 refuses to wait on it, query it, synchronise on it or time it ("invalid argument").
    """

    def __init__(
        self,
        enable_timing: bool = False,
        blocking: bool = False,
        interprocess: bool = False,
        **kwargs: Any,
    ) -> None:
        self.enable_timing = enable_timing
        self.recorded_at: float | None = None
        self.capture: Any = None
        self.clock: dict[Stream, int] = {}
        self.race_clock: dict[int, int] = {}

    def record(self, stream: Stream | None = None) -> None:
        stream = current_stream() if stream is None else stream
        self.recorded_at = time.perf_counter()
        self.capture = stream.capture
        self.clock = stream.capture.clock_of(stream) if stream.capture is not None else {}
        races = state.require().races
        if races is not None and stream.capture is None:
            self.race_clock = races.event_clock(stream)

    def wait(self, stream: Stream | None = None) -> None:
        stream = current_stream() if stream is None else stream
        races = state.require().races
        if races is not None and stream.capture is None:
            races.wait(stream, self.race_clock)
        capture = self.capture
        if capture is not None and not capture.active:
            if stream.capture is not None:
                stream.capture.invalidate()
            raise RuntimeError(cuda_errors.INVALID_ARGUMENT)
        if stream.capture is not None and capture is not stream.capture:
            if capture is None and self.recorded_at is not None:
                stream.capture.invalidate()
                raise RuntimeError(cuda_errors.ISOLATION)
            if capture is not None:
                # CUDA fails both sequences: neither capture can end any more.
                stream.capture.invalidate()
                capture.invalidate()
                raise RuntimeError(cuda_errors.MERGE)
        if capture is None:
            return
        if stream.capture is None:
            capture.fork(stream, self.clock)
        else:
            capture.merge(stream, self.clock)

    def query(self) -> bool:
        self._check_not_from_ended_capture()
        check_host_sync(self.capture)
        return True

    def synchronize(self) -> None:
        self._check_not_from_ended_capture()
        check_host_sync(self.capture)
        races = state.require().races
        if races is not None:
            races.host_waits_for(self.race_clock)

    def elapsed_time(self, end_event: Event) -> float:
        self._check_not_from_ended_capture()
        end_event._check_not_from_ended_capture()
        if self.recorded_at is None or end_event.recorded_at is None:
            raise RuntimeError("Both events must be recorded before calling elapsed_time().")
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with enable_timing=True.")
        return (end_event.recorded_at - self.recorded_at) * 1000.0

    def _check_not_from_ended_capture(self) -> None:
        if self.capture is not None and not self.capture.active:
            raise RuntimeError(cuda_errors.INVALID_ARGUMENT)


def check_host_sync(capture: Any, device_wide: bool = False) -> None:
    """Raises (and invalidates) when the host would wait on capturing work or break a capture.

    ``capture`` is the capture the awaited stream/event belongs to; a device-wide sync
    waits on every stream, the calling thread's capturing one included.
    """
    if capture is not None:
        capture.invalidate()
        raise RuntimeError(cuda_errors.NOT_PERMITTED)
    current = current_stream().capture
    if current is not None and (device_wide or current.mode != "relaxed"):
        current.invalidate()
        raise RuntimeError(cuda_errors.NOT_PERMITTED)
    state.require().check_unsafe_call()


def current_stream(device: Any = None) -> Stream:
    session = state.require()
    pair = getattr(_thread, "stream", None)
    if pair is None or pair[0] is not session:
        # A thread that never chose a stream: the autograd engine's device thread runs a
        # backward pass on the stream its caller was on (see autograd_on_caller_stream).
        return (session.autograd_stream or session.default_stream)._handle()
    return pair[1]._handle()


def default_stream(device: Any = None) -> Stream:
    return state.require().default_stream._handle()


def set_stream(stream_: Stream | None) -> None:
    if stream_ is not None:
        _thread.stream = (state.require(), stream_)


class StreamContext:
    """``torch.cuda.stream(s)``: makes ``s`` the thread's current stream for the block."""

    def __init__(self, stream_: Stream | None) -> None:
        self.stream = stream_
        self._previous: Stream | None = None

    def __enter__(self) -> Stream | None:
        if self.stream is not None:
            self._previous = current_stream()
            set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc: object) -> None:
        if self.stream is not None:
            set_stream(self._previous)


def stream(stream_: Stream | None) -> StreamContext:
    return StreamContext(stream_)


def is_current_stream_capturing() -> bool:
    return current_stream().capture is not None
