"""Fuzzer throughput: examples per second of the full loop against a bare capture loop.

Draws ``N`` programs once, then times (1) the full fuzzer loop on them (oracle: eager
reference, warm-up, capture, replays, break log and comparison) and (2) a bare loop that
only runs eager, captures and replays each program with the target, no checks. Both run
in this process on the same programs and device; the ratio is the oracle's overhead.
Also reports the full loop's rate per second of this process's CPU time, which load from
other processes on a shared machine inflates far less than wall time.
Writes ``results/fuzz_throughput_<device>.json``.

``--shapes`` instead compares whole ``fuzz`` campaigns (drawing, checking, shrinking) that draw
only plain programs with ones that draw engine-shaped programs beside them (the default),
alternating rounds in one run, and writes ``results/fuzz_shapes_<device>.json``.

Usage: ``python bench/fuzz_throughput.py [--device auto|cuda|sim] [--programs 100] [--shapes]``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from verification.devices import device_context, resolve_kind
from verification.execute import CapturedProgram, run_eager
from verification.fuzz import CampaignConfig, run_campaign
from verification.oracle import check_program
from verification.programs import Program, make_inputs, op_table, programs
from verification.targets import load_target

RESULTS = Path(__file__).resolve().parent.parent / "results"
REPLAYS = 3
ROUNDS = 3


def _timed(loop, cpu: list[float] | None = None) -> float:
    start, start_cpu = time.perf_counter(), time.process_time()
    loop()
    if cpu is not None:
        cpu.append(time.process_time() - start_cpu)
    return time.perf_counter() - start


def draw_programs(count: int, allow_tensor_returns: bool) -> list[Program]:
    drawn: list[Program] = []

    @settings(
        max_examples=count, database=None, deadline=None, suppress_health_check=list(HealthCheck)
    )
    @given(programs(allow_tensor_returns=allow_tensor_returns))
    def collect(program: Program) -> None:
        drawn.append(program)

    collect()
    return drawn


def compare_shapes(target: str, kind: str, examples: int) -> None:
    """Examples per second of ``fuzz`` drawing plain programs only, and plain and engine-shaped
    ones (today's default); best of ``ROUNDS`` alternating campaigns each, same seeds."""
    rates: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    loaded = load_target(target)
    for round_ in range(ROUNDS + 1):
        for engine in (False, True):
            config = CampaignConfig(
                target=loaded, kind=kind, examples=examples, seed=round_, engine=engine,
                database=None,
            )  # fmt: skip
            start = time.process_time()
            result = run_campaign(config)
            if round_ == 0:
                continue  # one-time costs land on the first campaign
            rates[engine].append(result.examples_per_second)
            cpu[engine].append(result.examples / (time.process_time() - start))
    plain, mixed = max(rates[False]), max(rates[True])
    out = {
        "device": kind,
        "target": target,
        "examples": examples,
        "rounds": ROUNDS,
        "plain_examples_per_s": plain,
        "engine_mix_examples_per_s": mixed,
        "plain_examples_per_cpu_s": max(cpu[False]),
        "engine_mix_examples_per_cpu_s": max(cpu[True]),
        "engine_mix_over_plain": mixed / plain,
        "target_engine_mix_over_plain": 1 / 1.3,
    }
    path = RESULTS / f"fuzz_shapes_{kind}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(
        f"fuzz, plain programs: {plain:.1f} examples/s; plain and engine-shaped: {mixed:.1f} "
        f"examples/s; ratio {mixed / plain:.2f} (target >= {1 / 1.3:.2f}); written to {path}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--programs", type=int, default=100)
    parser.add_argument("--target", default="breakable_cudagraph")
    parser.add_argument("--shapes", action="store_true")
    args = parser.parse_args()
    kind = resolve_kind(args.device)
    if args.shapes:
        compare_shapes(args.target, kind, args.programs)
        return
    target = load_target(args.target)
    drawn = draw_programs(args.programs, target.supports_tensor_returns)
    table = op_table()
    with device_context(kind) as device:

        def full_loop() -> None:
            for seed, program in enumerate(drawn):
                check_program(program, target, device, seed, REPLAYS)

        def bare_loop() -> None:
            for seed, program in enumerate(drawn):
                inputs = make_inputs(program, seed, device)
                run_eager(program, table, inputs, seed, kind)
                captured = CapturedProgram(program, table, target, inputs, seed, kind)
                for replay in range(REPLAYS):
                    captured.replay(inputs, seed + replay)

        # The first pass over the programs pays one-time costs (kernel and meta caches,
        # cuBLAS handles) that would otherwise land on whichever loop runs first; then the
        # loops alternate and each keeps its best round, so drift hits both alike.
        full_loop()
        bare_loop()
        full_cpu: list[float] = []
        full = min(_timed(full_loop, full_cpu) for _ in range(ROUNDS))
        bare = min(_timed(bare_loop) for _ in range(ROUNDS))
    result = {
        "device": kind,
        "target": target.name,
        "programs": len(drawn),
        "replays": REPLAYS,
        "fuzz_examples_per_s": len(drawn) / full,
        "fuzz_examples_per_cpu_s": len(drawn) / min(full_cpu),
        "bare_examples_per_s": len(drawn) / bare,
        "bare_over_fuzz": full / bare if bare else None,
        "fuzz_over_bare_rate": bare / full,
        "target_fuzz_over_bare_rate": 0.5,
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"fuzz_throughput_{kind}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"fuzz loop: {result['fuzz_examples_per_s']:.1f} examples/s "
        f"({result['fuzz_examples_per_cpu_s']:.1f} per CPU second); bare capture+replay: "
        f"{result['bare_examples_per_s']:.1f} programs/s; ratio {result['bare_over_fuzz']:.2f}x "
        f"(device={kind}); written to {path}"
    )


if __name__ == "__main__":
    main()
