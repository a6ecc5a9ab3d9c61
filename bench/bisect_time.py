"""Time of ``bisect`` against one plain eager-vs-replay comparison of the same model.

The baseline is what a user would write by hand: build the model twice from one seed, warm
up and capture one copy, then for each step prepare both, run the other eagerly, replay, and
compare the outputs (no tracing, no narrowing), stopping at the first step that differs. ``bisect`` does that with every op traced and
every break's arguments copied, and on a divergence builds the model again to narrow it down.
Both are timed in this process's CPU time (``time.process_time``, so that other processes on a
shared machine inflate neither), the median of ``--rounds`` rounds after one untimed round,
and written as a Markdown table.

Usage: ``python -m bench.bisect_time [--device sim|cuda] [--steps 8] [--rounds 3] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils._pytree import tree_leaves

from verification.bisect import bisect
from verification.devices import device_context, resolve_kind
from verification.planted.targets import build
from verification.targets import DEFAULT_TARGET, load_target

# (model, planted target bug or None). A planted target's row times bisect's slowest path
# (the capture agrees with eager, so the segment is recaptured with its ops forced into
# breaks); its plain comparison runs under this library, the same model and steps.
MODELS = (
    ("tests.harness.bisect.planted_models:correct", None),
    ("tests.harness.bisect.llama_model:llama", None),
    ("examples.bisect_transformer:transformer", None),
    ("tests.harness.bisect.planted_models:frozen_host_value", None),
    ("tests.harness.bisect.planted_models:break_caches_a_tensor", None),
    ("tests.harness.bisect.planted_models:host_branch", None),
    ("tests.harness.bisect.llama_model:llama", "output_not_copied_back"),
)


def plain_comparison(ref: str, kind: str, steps: int) -> bool:
    """Eager against replay of the outputs only; True when some step differs."""
    import breakable_cudagraph as bcg

    module_name, _, fn_name = ref.partition(":")
    sys.modules.pop(module_name, None)  # bisect's import routed its breaks to its target
    fn = getattr(importlib.import_module(module_name), fn_name)
    differed = False
    with device_context(kind, strict_warmup=False), torch.no_grad():
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            torch.manual_seed(0)
            eager_forward, eager_next = fn()
            torch.manual_seed(0)
            forward, next_step = fn()
            eager_forward()
            forward()
            with bcg.BreakableCUDAGraphCapture() as capture:
                outputs = forward()
            for step in range(steps):
                torch.manual_seed(step + 1)
                eager_next(step)
                expected = eager_forward()
                torch.manual_seed(step + 1)
                next_step(step)
                capture.replay()
                leaves = zip(tree_leaves(expected), tree_leaves(outputs))
                if any(a.shape != b.shape or not torch.allclose(a, b) for a, b in leaves):
                    differed = True
                    break  # as bisect, stop at the first step that differs
            torch.cuda.synchronize()
    return differed


def _cpu(fn) -> tuple[float, object]:
    start = time.process_time()
    value = fn()
    return time.process_time() - start, value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=("auto", "sim", "cuda"))
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    kind = resolve_kind(args.device)
    rows = []
    for ref, bug in MODELS:
        target = load_target(build(bug) if bug else DEFAULT_TARGET)
        plain, full = [], []
        plain_comparison(ref, kind, args.steps)  # untimed: first-use costs of either side
        bisect(ref, kind, target=target, steps=args.steps)
        for _ in range(args.rounds):
            seconds, differed = _cpu(lambda r=ref: plain_comparison(r, kind, args.steps))
            plain.append(seconds)
            seconds, result = _cpu(
                lambda r=ref, t=target: bisect(r, kind, target=t, steps=args.steps)
            )
            full.append(seconds)
        answer = result.finding.line() if result.finding else "no divergence"
        p, b = statistics.median(plain), statistics.median(full)
        rows.append(
            f"| `{ref.split('.')[-1]}`{f' under planted `{bug}`' if bug else ''} | {'differs' if differed else 'same'} | {p:.2f} | {b:.2f} "
            f"| {b / p:.1f}x | {result.steps} | {answer.replace('bisect: ', '')} |"
        )
        print(rows[-1], flush=True)
    table = "\n".join(
        [
            f"device `{kind}`, torch {torch.__version__}, {args.steps} steps, median of "
            f"{args.rounds} rounds, CPU seconds of this process",
            "",
            "| model | plain comparison | plain s | bisect s | ratio | steps run | bisect's answer |",
            "| --- | --- | ---: | ---: | ---: | ---: | --- |",
            *rows,
        ]
    )
    print(table)
    if args.out is not None:
        args.out.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
