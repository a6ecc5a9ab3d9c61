"""Stream race detection on the simulator: happens-before over streams, events and the host.

Modelled on ``torch.cuda._sanitizer`` (CSAN), but it also sees the ops inside replayed graphs
and eager steps. Each stream has a vector clock; recording an event snapshots it, waiting on
an event (``wait_event``, ``wait_stream``) merges it, and a host sync lets later work on
every stream follow what the host waited for. Every device op is a read or write of the
allocator blocks its tensors live in; one not ordered after the block's last write (or, for a
write, after its reads) on another stream raises :class:`StreamRaceError` naming both
accesses. Reusing a freed block on a stream not ordered after its last users is a race too,
unless they were declared with ``record_stream``.

Enable it with ``with detect_races():`` inside ``simulated_cuda()`` (or ``BCG_SIM_RACES=1``
for every simulator session).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from verification.sim import state

Clock = dict[int, int]


@dataclass(frozen=True)
class Access:
    """One op's use of a block: what, where (eager, graph replay), on which stream, when."""

    op: str
    kind: str  # "read" or "write"
    stream: int
    seq: int
    where: str

    def __str__(self) -> str:
        return f"{self.kind} by {self.op} on stream {self.stream} ({self.where})"


class StreamRaceError(RuntimeError):
    """Two accesses to the same device memory on different streams with no ordering."""

    def __init__(self, address: int, current: Access, previous: Access) -> None:
        self.address = address
        self.current = current
        self.previous = previous
        super().__init__(
            f"stream race on device memory {address:#x}: {current} is not ordered after "
            f"{previous}; make the stream wait (wait_stream / wait_event) or call "
            "record_stream on the tensor"
        )


class _History:
    __slots__ = ("last_write", "reads", "recorded")

    def __init__(self) -> None:
        self.last_write: Access | None = None
        self.reads: dict[int, Access] = {}
        self.recorded: set[int] = set()  # streams named by record_stream


def _merge(into: Clock, other: Clock) -> None:
    for stream, seq in other.items():
        if seq > into.get(stream, 0):
            into[stream] = seq


def _schema_writes(func: Any) -> list[bool]:
    return [a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments]


class RaceDetector:
    """Vector clocks per stream and the access history of every block."""

    def __init__(self, allocator: Any) -> None:
        self._allocator = allocator
        self._clocks: dict[int, Clock] = {}
        self._host: Clock = {}
        self._history: dict[int, _History] = {}
        self._lock = threading.RLock()

    def _clock(self, stream: Any) -> Clock:
        clock = self._clocks.get(stream.stream_id)
        if clock is None:
            clock = self._clocks[stream.stream_id] = {}
        _merge(clock, self._host)  # work issued after a host sync follows what it waited for
        return clock

    def event_clock(self, stream: Any) -> Clock:
        with self._lock:
            return dict(self._clock(stream))

    def wait(self, stream: Any, clock: Clock) -> None:
        with self._lock:
            _merge(self._clock(stream), clock)

    def host_waits_for(self, clock: Clock) -> None:
        with self._lock:
            _merge(self._host, clock)

    def host_waits_for_stream(self, stream: Any) -> None:
        self.host_waits_for(self.event_clock(stream))

    def host_waits_for_device(self) -> None:
        with self._lock:
            for clock in self._clocks.values():
                _merge(self._host, clock)

    def record_stream(self, tensor: torch.Tensor, stream: Any) -> None:
        block = self._allocator.find(tensor.untyped_storage().data_ptr())
        if block is not None:
            with self._lock:
                self._history.setdefault(block.address, _History()).recorded.add(stream.stream_id)

    def op(
        self, func: Any, args: tuple, kwargs: dict, result: Any, stream: Any, where: str
    ) -> None:
        """Checks and records ``func``'s accesses (host views over blocks) on ``stream``."""
        writes = _schema_writes(func)
        accesses: list[tuple[torch.Tensor, bool]] = []
        for i, spec in enumerate(func._schema.arguments):
            value = kwargs.get(spec.name) if spec.kwarg_only or i >= len(args) else args[i]
            for t in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(t, torch.Tensor):
                    accesses.append((t, writes[i]))
        for t in result if isinstance(result, (list, tuple)) else (result,):
            if isinstance(t, torch.Tensor):
                accesses.append((t, True))
        with self._lock:
            clock = self._clock(stream)
            seq = clock[stream.stream_id] = clock.get(stream.stream_id, 0) + 1
            for t, is_write in accesses:
                block = self._allocator.find(t.untyped_storage().data_ptr())
                if block is None:
                    continue  # host memory
                access = Access(
                    str(func), "write" if is_write else "read", stream.stream_id, seq, where
                )
                self._access(block.address, access, clock)

    def _ordered(self, previous: Access | None, current: Access, clock: Clock) -> bool:
        return (
            previous is None
            or previous.stream == current.stream
            or clock.get(previous.stream, 0) >= previous.seq
        )

    def _access(self, address: int, access: Access, clock: Clock) -> None:
        history = self._history.setdefault(address, _History())
        if not self._ordered(history.last_write, access, clock):
            raise StreamRaceError(address, access, history.last_write)  # type: ignore[arg-type]
        if access.kind == "read":
            history.reads[access.stream] = access
            return
        for read in history.reads.values():
            if not self._ordered(read, access, clock):
                raise StreamRaceError(address, access, read)
        history.last_write = access
        history.reads = {}

    def reuse(self, address: int, stream: Any) -> None:
        """A freed block is handed to an allocation on ``stream``."""
        with self._lock:
            history = self._history.pop(address, None)
            if history is None:
                return
            clock = self._clock(stream)
            reuse = Access("allocation reusing freed memory", "write", stream.stream_id, 0, "eager")
            for previous in (history.last_write, *history.reads.values()):
                if previous is None or previous.stream in history.recorded:
                    continue
                if not self._ordered(previous, reuse, clock):
                    raise StreamRaceError(address, reuse, previous)


def detector() -> RaceDetector | None:
    """The active session's race detector, if race detection is on."""
    session = state.session
    return None if session is None else session.races


@contextlib.contextmanager
def detect_races() -> Iterator[RaceDetector]:
    """Turns race detection on for the block (inside ``simulated_cuda()``), as before after."""
    session = state.require()
    previous = session.races
    session.races = previous or RaceDetector(session.allocator)
    try:
        yield session.races
    finally:
        session.races = previous


def enabled_by_environment() -> bool:
    return os.environ.get("BCG_SIM_RACES", "") not in ("", "0")
