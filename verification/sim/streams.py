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


class Stream:
    """A simulated ``torch.cuda.Stream``; ``capture`` is the capture it belongs to, if any."""

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        self.stream_id = next(_stream_ids)
        self.priority = priority
        self.capture: Any = None

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

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.stream_id == self.stream_id

    def __hash__(self) -> int:
        return hash(("sim-stream", self.stream_id))

    def __repr__(self) -> str:
        return f"<simulated torch.cuda.Stream device=cuda:0 cuda_stream={self.stream_id:#x}>"

    def __enter__(self) -> Stream:
        self._ctx = stream(self)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._ctx.__exit__(*exc)


class Event:
    """A simulated ``torch.cuda.Event``: remembers where (and in which capture) it was recorded."""

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
        if capture is None or not capture.active:
            return
        if stream.capture is None:
            capture.fork(stream, self.clock)
        elif stream.capture is capture:
            capture.merge(stream, self.clock)

    def query(self) -> bool:
        check_host_sync(self._live_capture())
        return True

    def synchronize(self) -> None:
        check_host_sync(self._live_capture())
        races = state.require().races
        if races is not None:
            races.host_waits_for(self.race_clock)

    def elapsed_time(self, end_event: Event) -> float:
        if self.recorded_at is None or end_event.recorded_at is None:
            raise RuntimeError("Both events must be recorded before calling elapsed_time().")
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with enable_timing=True.")
        return (end_event.recorded_at - self.recorded_at) * 1000.0

    def _live_capture(self) -> Any:
        return self.capture if self.capture is not None and self.capture.active else None


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
        return session.default_stream
    return pair[1]


def default_stream(device: Any = None) -> Stream:
    return state.require().default_stream


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
