"""The simulated device's random number generator, separate from the host's, as on CUDA.

Random ops on device tensors run on the CPU, so they draw from ``torch.default_generator``;
:meth:`DeviceRNG.active` swaps the device generator's state in for the duration of such an
op (eager, or a replay), so host and device streams of random numbers never mix.

Like torch's CUDA generator, it keeps a device seed and offset for graphs while any graph
that began a capture lives (a 1 KiB part of a capture's memory growth).

``capturing`` mirrors the CUDA generator's capture flag: set when a capture begins, cleared
when one ends. A capture whose ``capture_end`` fails leaves it set (torch skips the
generator's epilogue), and then every random op outside a capture raises, as on the H200,
until some capture ends successfully.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

# CUDA's default generator seed (c10::detail::default_rng_seed_val).
DEFAULT_SEED = 67280421310721


class DeviceRNG:
    def __init__(self) -> None:
        self.generator = torch.Generator()
        self.manual_seed(DEFAULT_SEED)
        self.capturing = False
        # Graphs that began a capture and still live, and the device seed and offset torch
        # keeps for them: two 1-element int64 tensors (a 512-byte block each) allocated when
        # the first graph registers, so even by a capture_begin then refused on the default
        # stream, and freed when the last registered graph is destroyed.
        self._graphs: set[int] = set()
        self._extragraph: tuple[torch.Tensor, torch.Tensor] | None = None

    def register_graph(self, graph_id: int) -> None:
        if not self._graphs:
            self._extragraph = tuple(  # type: ignore[assignment]
                torch.empty(1, dtype=torch.int64, device="cuda") for _ in range(2)
            )
        self._graphs.add(graph_id)

    def capture_prologue(self) -> None:
        """A capture begins."""
        self.capturing = True

    def unregister_graph(self, graph_id: int) -> None:
        self._graphs.discard(graph_id)
        if not self._graphs:
            self._extragraph = None

    def manual_seed(self, seed: int) -> None:
        self.generator.manual_seed(seed)

    @property
    def seed(self) -> int:
        # Read from the generator: ``torch.cuda.default_generators[0]`` is that generator,
        # and users seed it directly too.
        return self.generator.initial_seed()

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        host = torch.default_generator.get_state()
        torch.default_generator.set_state(self.generator.get_state())
        try:
            yield
        finally:
            self.generator.set_state(torch.default_generator.get_state())
            torch.default_generator.set_state(host)


class _AnyGenerator(type(torch._C.Generator)):  # type: ignore[misc]
    # While ``torch.Generator`` is DeviceGenerator, every generator (the default ones
    # included) must still pass ``isinstance(g, torch.Generator)``.
    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, torch._C.Generator)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, torch._C.Generator)


class DeviceGenerator(torch._C.Generator, metaclass=_AnyGenerator):
    """``torch.Generator`` while the simulator is open: ``torch.Generator(device="cuda")``
    is a CPU generator (device ops run on the CPU and draw from it) that reports the device
    as its own; any other device gets torch's own generator."""

    def __new__(cls, device: Any = "cpu") -> Any:
        if torch.device(device).type != "cuda":
            return torch._C.Generator(device)
        return super().__new__(cls)

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cuda", 0)

    # torch's own return a new wrapper of the base type, which would lose the device. (An
    # op gets such a wrapper too, so the simulator cannot refuse a host generator for a
    # device draw, as CUDA does.)
    def manual_seed(self, seed: int) -> DeviceGenerator:
        super().manual_seed(seed)
        return self

    def set_state(self, new_state: torch.Tensor) -> DeviceGenerator:
        super().set_state(new_state)
        return self
