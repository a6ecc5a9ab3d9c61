"""``python -m bench``: the one benchmark entry point (replay/capture against breaks, transformer).

Runs the micro benchmark (eager, one ``torch.cuda.graph``, this library, ``breakable-cuda-graphs``
when installed, ``bench.minimal``) at every k, the floor, the side-stream scenario
(``bench.side_stream``) and the transformer workload, in one process; judges the issues' targets
and writes ``bench.json``, ``bench.md`` and PNG plots. Bad arguments print one ``error:`` line and
exit 2.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

import torch

from bench import micro, report, side_stream, targets, transformer
from verification.devices import device_context, resolve_kind
from verification.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
QUICK = {
    "ops": 9,
    "breaks": [0, 1, 4],
    "numel": 256,
    "rounds": 2,
    "n": 2,
    "batches": [1],
    "side_breaks": [0, 1, 4],
    "side_rounds": 2,
    "side_n": 3,
    "side_warmup": 1,
}
QUICK_MODEL = transformer.Config(layers=2, d_model=32, heads=2, ffn=64, vocab=64, seq_len=8)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto", help="auto, cuda or sim (default auto)")
    p.add_argument("--out", type=Path, help="results folder (default results/gpu or results/sim)")
    p.add_argument("--breaks", type=int, nargs="+", default=[0, 1, 2, 4, 16, 64, 256])
    p.add_argument("--ops", type=int, default=257, help="one-kernel ops in the body (> max k)")
    p.add_argument("--numel", type=int, default=4096, help="elements each op touches")
    p.add_argument("--rounds", type=int, default=15, help="interleaved rounds per k")
    p.add_argument("--n", type=int, default=10, help="replays per target per round")
    p.add_argument("--batches", type=int, nargs="*", default=[1, 2, 4, 8, 16, 32, 64])
    p.add_argument(
        "--side-breaks",
        type=int,
        nargs="*",
        default=list(side_stream.BREAKS),
        help="k of the side-stream scenario; none skips it",
    )
    p.add_argument("--side-rounds", type=int, default=4, help="side-stream scenario rounds")
    p.add_argument("--side-n", type=int, default=100, help="timed replay pairs per capture there")
    p.add_argument("--side-warmup", type=int, default=20, help="warm-up replays per capture there")
    p.add_argument(
        "--side-unprimed",
        action="store_true",
        help="skip the priming capture per target (shows the process-wide state change)",
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes (the simulator smoke test)")
    return p


def _check(args: argparse.Namespace) -> None:
    if any(k < 0 for k in args.breaks) or max(args.breaks) >= args.ops:
        raise UsageError(f"--breaks must be >= 0 and below --ops ({args.ops})")
    if 0 not in args.breaks:
        raise UsageError("--breaks must include 0: per-break overhead is measured against it")
    for name in ("numel", "rounds", "n"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name} must be at least 1")
    if any(b < 1 for b in args.batches):
        raise UsageError("--batches must be positive")
    if args.side_breaks:
        if any(k < 0 or k >= side_stream.OPS for k in args.side_breaks):
            raise UsageError(f"--side-breaks must be >= 0 and below {side_stream.OPS}")
        if 0 not in args.side_breaks:
            raise UsageError("--side-breaks must include 0: added time is measured against it")
    for name in ("side_rounds", "side_n"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if args.side_warmup < 0:
        raise UsageError("--side-warmup must be at least 0")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    try:
        _check(args)
        kind = resolve_kind(args.device)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    out = args.out or ROOT / "results" / ("gpu" if kind == "cuda" else "sim")
    names = [t for t in micro.TARGETS if t != "peer" or micro.have_peer()]
    with device_context(kind) as device:
        floor = micro.measure_floor(device, args.rounds, args.n, max(args.breaks) or 1)
        print(f"floor: {floor['floor_s'] * 1e6:.2f} us per (graph launch + eager call)")
        micro_result = micro.run(
            device, tuple(args.breaks), args.ops, args.numel, args.rounds, args.n, tuple(names)
        )
        side = None
        if args.side_breaks:
            side = side_stream.run(
                device,
                tuple(sorted(set(args.side_breaks))),
                args.side_rounds,
                args.side_warmup,
                args.side_n,
                tuple(t for t in side_stream.BUILDERS if t != "peer" or micro.have_peer()),
                profile_gpu=kind == "cuda",
                prime=not args.side_unprimed,
            )
        tf = None
        if args.batches:
            cfg = QUICK_MODEL if args.quick else transformer.Config()
            tf = transformer.run(
                device, tuple(args.batches), cfg, max(2, args.rounds // 3), args.n, kind == "cuda"
            )
        peer = None
        if micro.have_peer():
            import breakable_cuda_graphs

            peer = getattr(breakable_cuda_graphs, "__version__", "installed")
        result: dict[str, Any] = {
            "meta": {
                "device": kind,
                "command": "python -m bench " + shlex.join(argv),
                "torch": torch.__version__,
                "gpu": torch.cuda.get_device_name() if kind == "cuda" else None,
                "peer": peer,
            },
            "targets": names,
            "floor": floor,
            "micro": micro_result,
            "side_stream": side,
            "transformer": tf,
        }
        verdicts = targets.judge(micro_result, floor)
        if side is not None:
            verdicts += targets.judge_side_stream(side)
        if tf is not None:
            verdicts += targets.judge_transformer(tf)
    for v in verdicts:
        print(
            f"{'met   ' if v['met'] else 'MISSED'} {v['target']} (k={v['breaks']}): "
            f"{v['ratio']:.3f} vs {v['limit']}"
        )
    paths = report.write(out, result, verdicts)
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
