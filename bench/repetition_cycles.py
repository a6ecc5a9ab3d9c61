"""Seconds per cycle of the repetition property (capture, replay, reset) on a fixed 3-step,
1-break program, for ``--cycles`` cycles; writes ``results/repetition_cycles_<device>.json``."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from verification.devices import device_context, resolve_kind
from verification.ops.spec import TensorMeta
from verification.programs import Program, Step
from verification.properties import repetition
from verification.properties.base import CheckConfig
from verification.targets import load_target

PROGRAM = Program(
    (TensorMeta((64,), torch.float32),),
    (
        Step("exp", (0,), (), False),
        Step("scale_by_item", (1,), (), True),
        Step("neg", (2,), (), False),
    ),
    (3,),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--cycles", type=int, default=1000)
    args = parser.parse_args()
    kind = resolve_kind(args.device)
    with device_context(kind) as device:
        config = CheckConfig(load_target("breakable_cudagraph"), kind, device, 1)
        config.cycles = 10
        repetition.repetition_problem(PROGRAM, config)  # first-use costs out of the timing
        config.cycles = args.cycles
        start = time.perf_counter()
        problem = repetition.repetition_problem(PROGRAM, config)
        seconds = time.perf_counter() - start
    result = {
        "device": kind,
        "cycles": args.cycles,
        "seconds": round(seconds, 2),
        "ms_per_cycle": round(seconds / args.cycles * 1000, 2),
        "estimated_seconds_for_10000": round(seconds / args.cycles * 10_000),
        "problem": problem,
    }
    Path("results").mkdir(exist_ok=True)
    Path(f"results/repetition_cycles_{kind}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
