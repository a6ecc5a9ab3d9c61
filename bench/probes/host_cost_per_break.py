"""Host cost per break (issue 23): this library against ``bench.minimal`` in the side-stream setup.

``bench.side_stream``'s body (256 in-place launches, k breaks ``y.add_(0.0)``, capture and replay
on a side stream, a fresh capture per target) is captured at ``--capture-k`` breaks, and replayed
at ``--replay-k`` breaks in pairs with a k = 0 capture of the same target. Targets alternate in
rotated orders within each round, so a machine-wide slowdown moves both. Per round it records the
capture time, the replay time each break adds (median of the pairs' differences, synced, and the
CPU time of the launches alone), and the library/minimal ratio of each; it prints the median and
[min, max] of the ratios over rounds. ``--baseline DIR`` times another copy of the package (say
``git archive`` of an older commit) in the same rounds, which is how before/after is compared on
a noisy machine; ``--profile`` adds the library's own functions under cProfile. Times are this
thread's CPU time on the simulator (other processes on a shared machine then inflate neither
side) and wall time on a GPU. ``--device stub`` runs on CPU tensors with ``torch.cuda``'s graph,
stream and allocator calls replaced by do-nothing stand-ins (``bench.capture_overhead_cpu``),
``y`` outside every pool as on the GPU: what is left is each implementation's own Python, which
the simulator's cost per launch (about 100 us) hides. There it also times a tight loop of
``--loop`` breaks on a function that does nothing, with no ops between them, captured and then
replayed: the break's own cost, with no kernel's time around it.

``python -m bench.probes.host_cost_per_break --device sim|cuda|stub [--rounds 7] [--baseline DIR]``
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import io
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

import torch

import breakable_cudagraph
from bench.capture_overhead_cpu import fake_cuda, load_baseline
from bench.minimal import MinimalCapture
from bench.side_stream import NUMEL, OPS, Captured, add_zero, body, cut_points
from verification.devices import device_context, resolve_kind
from verification.errors import UsageError

Build = Callable[[torch.Tensor, torch.Tensor, set[int]], Captured]


def library_builder(lib: ModuleType, **options: Any) -> Build:
    """``bench.side_stream``'s library target for any copy of the package (a baseline's too)."""

    def build(x: torch.Tensor, y: torch.Tensor, cuts: set[int]) -> Captured:
        brk = lib.eager_break_during_capture(add_zero)
        cap = lib.BreakableCUDAGraphCapture(**options)
        with cap:
            body(x, y, cuts, brk)
        return Captured(cap.replay, [], [cap])

    return build


def minimal_build(x: torch.Tensor, y: torch.Tensor, cuts: set[int]) -> Captured:
    cap = MinimalCapture()
    with cap:
        body(x, y, cuts, lambda t: cap.brk(add_zero, t))
    return Captured(cap.replay, [], [cap])


def _release(cap: Captured) -> None:
    for owner in cap.keep:
        if hasattr(owner, "reset"):
            owner.reset()
    cap.keep.clear()


class Probe:
    """The tensors, stream and clock one run shares between its targets."""

    def __init__(self, device: str, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.s = torch.cuda.Stream()
        self.x = torch.randn(NUMEL, device=device)
        self.y = torch.randn(NUMEL, device=device)
        self.s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.s):  # every kernel once eagerly before any capture
            body(self.x, self.y, cut_points(OPS + 1, 1), add_zero)
        torch.cuda.synchronize()

    def capture(self, build: Build, k: int) -> tuple[Captured, float]:
        cuts = cut_points(OPS, k) if k else set()
        gc.collect()  # a collection inside the timed capture would land on either target
        with torch.cuda.stream(self.s):
            torch.cuda.synchronize()
            start = self.clock()
            cap = build(self.x, self.y, cuts)
            torch.cuda.synchronize()
            return cap, self.clock() - start

    def replay_pairs(
        self, base: Captured, broken: Captured, n: int, block: int
    ) -> tuple[float, float]:
        """Median over ``n`` pairs of (broken - base), each side ``block`` synced replays
        averaged: synced time, and CPU time of the launches alone."""
        synced: list[float] = []
        launched: list[float] = []
        clock = self.clock
        with torch.cuda.stream(self.s):
            for i in range(n):
                times: dict[int, tuple[float, float]] = {}
                for which in (0, 1) if i % 2 else (1, 0):
                    replay = (base, broken)[which].replay
                    total = launch = 0.0
                    for _ in range(block):
                        torch.cuda.synchronize()
                        start = clock()
                        replay()
                        mid = clock()
                        torch.cuda.synchronize()
                        total += clock() - start
                        launch += mid - start
                    times[which] = (total / block, launch / block)
                synced.append(times[1][0] - times[0][0])
                launched.append(times[1][1] - times[0][1])
        return statistics.median(synced), statistics.median(launched)


def run_round(
    probe: Probe,
    targets: dict[str, Build],
    order: list[str],
    ks: dict[str, int],
    n: int,
    captures: int,
    block: int = 1,
) -> dict[str, dict[str, float]]:
    """One round: each target's captures at ``capture_k`` in turn (the median of ``captures``
    kept), then its replay pairs at ``replay_k``."""
    capture_k, replay_k = ks["capture_k"], ks["replay_k"]
    out: dict[str, dict[str, float]] = {name: {} for name in order}
    times: dict[str, list[float]] = {name: [] for name in order}
    for _ in range(captures):
        for name in order:
            cap, seconds = probe.capture(targets[name], capture_k)
            times[name].append(seconds)
            _release(cap)
    for name in order:
        out[name]["capture_s"] = statistics.median(times[name])
    for name in order:
        base, _ = probe.capture(targets[name], 0)
        broken, _ = probe.capture(targets[name], replay_k)
        with torch.cuda.stream(probe.s):  # warm-up replays
            for _ in range(3):
                base.replay()
                broken.replay()
        synced, launched = probe.replay_pairs(base, broken, n, block)
        out[name]["replay_per_break_s"] = synced / replay_k
        out[name]["launch_per_break_s"] = launched / replay_k
        _release(base)
        _release(broken)
    return out


FIGURES = {
    "capture_s": "capture at k={capture_k} (ms)",
    "replay_per_break_s": "replay per break at k={replay_k}, synced (us)",
    "launch_per_break_s": "replay per break at k={replay_k}, launches' CPU time (us)",
}


def _nothing(t: torch.Tensor) -> None:
    pass


def loop_builder(lib: ModuleType | None) -> Callable[[torch.Tensor, int], Captured]:
    """``n`` back-to-back breaks on ``_nothing`` in one capture: ``lib``'s, or the minimal's."""

    def build(y: torch.Tensor, n: int) -> Captured:
        if lib is None:
            minimal = MinimalCapture()
            with minimal:
                for _ in range(n):
                    minimal.brk(_nothing, y)
            return Captured(minimal.replay, [], [minimal])
        brk = lib.eager_break_during_capture(_nothing)
        cap = lib.BreakableCUDAGraphCapture()
        with cap:
            for _ in range(n):
                brk(y)
        return Captured(cap.replay, [], [cap])

    return build


def tight_loop(
    builders: dict[str, Callable[[torch.Tensor, int], Captured]], n: int, rounds: int
) -> str:
    """Thread CPU time per break of each builder's loop, captured and replayed (10 times),
    medians over rounds of rotating order."""
    y = torch.zeros(16)
    names = list(builders)
    capture: dict[str, list[float]] = {name: [] for name in names}
    replay: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds + 1):  # the first round warms up
        for name in names[r % len(names) :] + names[: r % len(names)]:
            gc.collect()
            start = time.thread_time()
            cap = builders[name](y, n)
            middle = time.thread_time()
            for _ in range(10):
                cap.replay()
            end = time.thread_time()
            _release(cap)
            if r:
                capture[name].append((middle - start) / n)
                replay[name].append((end - middle) / (10 * n))
    lines = [f"tight loop of {n} breaks on a function that does nothing, per break (us)"]
    for name in names:
        lines.append(
            f"  {name:9s} capture {_spread([t * 1e6 for t in capture[name]])}"
            f"  replay {_spread([t * 1e6 for t in replay[name]])}"
        )
    return "\n".join(lines)


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


def report(rounds: list[dict[str, dict[str, float]]], names: list[str], ks: dict[str, int]) -> str:
    """Per figure: each target's median [min, max] over rounds, then each one's per-round ratio
    to minimal (median [min, max])."""
    lines = []
    for key, title in FIGURES.items():
        scale = 1e3 if key == "capture_s" else 1e6
        lines.append(title.format(**ks))
        for name in names:
            values = [r[name][key] * scale for r in rounds]
            lines.append(f"  {name:9s} {_spread(values)}")
        for name in names:
            if name == "minimal":
                continue
            ratios = [r[name][key] / r["minimal"][key] for r in rounds]
            lines.append(f"  {name}/minimal {_spread(ratios)}")
    return "\n".join(lines)


def profile(probe: Probe, targets: dict[str, Build], ks: dict[str, int], top: int) -> str:
    """Each target under cProfile, five captures at ``capture_k`` and then 50 replays at
    ``replay_k``, its ``top`` functions by own time: on a GPU this tells the CUDA calls
    (``capture_begin``, ``capture_end``, ``replay``) from each implementation's Python."""
    out = io.StringIO()
    for name, build in targets.items():
        for what, k in (("capture", ks["capture_k"]), ("replay", ks["replay_k"])):
            profiler = cProfile.Profile()
            with torch.cuda.stream(probe.s):
                if what == "capture":
                    profiler.enable()
                    for _ in range(5):
                        _release(build(probe.x, probe.y, cut_points(OPS, k)))
                    profiler.disable()
                else:
                    cap = build(probe.x, probe.y, cut_points(OPS, k))
                    profiler.enable()
                    for _ in range(50):
                        cap.replay()
                    profiler.disable()
                    _release(cap)
            torch.cuda.synchronize()
            out.write(f"--- {name} {what} at k={k}, by own time\n")
            pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


@contextlib.contextmanager
def stub_device() -> Iterator[str]:
    """CPU tensors under ``fake_cuda``, with an allocator that holds no pool memory: the break's
    ``y`` is then held strongly, as on the GPU where it was allocated before the capture."""
    with fake_cuda(), mock.patch.object(torch.cuda, "memory_snapshot", lambda *a, **k: []):
        yield "cpu"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.probes.host_cost_per_break", description=__doc__.splitlines()[0]
    )
    p.add_argument("--device", default="auto", help="auto, cuda, sim or stub (default auto)")
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    p.add_argument("--n", type=int, default=30, help="replay pairs per target and round")
    p.add_argument("--captures", type=int, default=3, help="timed captures per target and round")
    p.add_argument("--block", type=int, default=5, help="replays per side of a timed pair")
    p.add_argument("--capture-k", type=int, default=255, help="breaks in the timed capture")
    p.add_argument("--replay-k", type=int, default=16, help="breaks in the timed replay")
    p.add_argument("--baseline", type=Path, help="another copy of the package, timed beside")
    p.add_argument(
        "--global-mode",
        action="store_true",
        help="also time the library with capture_error_mode='global', the minimal's mode",
    )
    p.add_argument("--profile", action="store_true", help="also cProfile every target")
    p.add_argument("--loop", type=int, default=1000, help="breaks in the stub's tight loop")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        for name in ("capture_k", "replay_k"):
            if not 1 <= getattr(args, name) < OPS:
                raise UsageError(f"--{name.replace('_', '-')} must lie in 1..{OPS - 1}")
        if min(args.rounds, args.n, args.captures, args.block, args.loop) < 1:
            raise UsageError("--rounds, --n, --captures, --block and --loop must be at least 1")
        if args.baseline is not None and not (args.baseline / "__init__.py").is_file():
            raise UsageError(f"--baseline {args.baseline} holds no package (__init__.py)")
        kind = "stub" if args.device == "stub" else resolve_kind(args.device)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    targets: dict[str, Build] = {
        "minimal": minimal_build,
        "library": library_builder(breakable_cudagraph),
    }
    if args.global_mode:
        targets["library_global"] = library_builder(
            breakable_cudagraph, capture_error_mode="global"
        )
    baseline = None if args.baseline is None else load_baseline(args.baseline)
    if baseline is not None:
        targets["baseline"] = library_builder(baseline)
    clock = time.perf_counter if kind == "cuda" else time.thread_time
    names = list(targets)
    ks = {"capture_k": args.capture_k, "replay_k": args.replay_k}
    if kind == "stub":
        torch.set_num_threads(1)
    with stub_device() if kind == "stub" else device_context(kind) as device:
        probe = Probe(device, clock)
        run_round(probe, targets, names, ks, 2, 1)  # warm-up round
        rounds = []
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            if r % 2:
                order.reverse()
            rounds.append(run_round(probe, targets, order, ks, args.n, args.captures, args.block))
        clock_name = "wall" if kind == "cuda" else "thread CPU"
        print(
            f"device {kind}, {args.rounds} rounds of {args.captures} captures and {args.n} replay"
            f" pairs of {args.block} per target, {clock_name} time; median [min, max] over rounds"
        )
        print(report(rounds, names, ks))
        if kind == "stub":
            loops = {"minimal": loop_builder(None), "library": loop_builder(breakable_cudagraph)}
            if baseline is not None:
                loops["baseline"] = loop_builder(baseline)
            print(tight_loop(loops, args.loop, args.rounds))
        if args.profile:
            print(profile(probe, targets, ks, 20))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
