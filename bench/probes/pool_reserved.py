"""GPU probe: which segments stay reserved after the pool property drops its captures.

Runs the pool property's shared-pool scenario on its witness program for a target, then
prints every segment left in ``memory_snapshot`` (pool id, stream, size, allocated bytes) and
reserved memory before, after settling, and after an extra ``empty_cache`` (issue 11's
"reserved memory returns to its baseline"). ``python -m bench.probes.pool_reserved [TARGET]``.
"""

from __future__ import annotations

import json
import sys

import torch

from verification.properties import pool as pool_property
from verification.properties.base import CheckConfig
from verification.properties.runs import reserved, settle
from verification.targets import load_target


def segments() -> list[dict]:
    return [
        {
            "pool": list(s.get("segment_pool_id") or (0, 0)),
            "stream": s.get("stream"),
            "size": s["total_size"],
            "allocated": s["allocated_size"],
        }
        for s in torch.cuda.memory_snapshot()
    ]


def main() -> None:
    target = load_target(sys.argv[1] if len(sys.argv) > 1 else "breakable_cudagraph")
    config = CheckConfig(target=target, kind="cuda", device="cuda", examples=10)
    settle("cuda")
    print(json.dumps({"baseline": reserved(), "segments": segments()}))
    held: list[int] = []
    problem = pool_property._shared_pool_problem(
        [pool_property.WITNESS, pool_property.WITNESS], config, held
    )
    print(json.dumps({"problem": problem, "after": reserved(), "segments": segments()}))
    settle("cuda")
    print(json.dumps({"after_second_settle": reserved(), "segments": segments()}))


if __name__ == "__main__":
    main()
