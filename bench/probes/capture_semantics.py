"""Probe for issue 26: capture behaviours whose outcome on the H200 is in doubt, or that may
leave a process unusable (a sticky CUDA error, a cuSOLVER handle that exists or not), each
run in a fresh child process on ``--device cuda`` or ``--device sim``.

Each scenario prints one JSON line: its name, the child's exit code, and what every step did
("ok", a value, or the exception's first line). ``tests/sim/test_capture_semantics_h200.py`` runs
some scenarios through :func:`run` and asserts on the steps, the same on both devices.
Usage: ``python -m bench.probes.capture_semantics [--device cuda|sim] [SCENARIO ...]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import torch

Steps = dict[str, Any]


def _outcome(fn: Callable[[], Any]) -> Any:
    try:
        value = fn()
    except Exception as error:  # a probe reports every outcome
        return f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
    return "ok" if value is None or isinstance(value, torch.Tensor) else value


def _put(box: dict[str, Any], key: str, make: Callable[[], Any]) -> Callable[[], None]:
    """A step that keeps what ``make`` returns in ``box`` (a capture's outputs must live)."""

    def step() -> None:
        box[key] = make()

    return step


def _side() -> torch.cuda.Stream:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    return s


def out_resize(steps: Steps, scalar: bool = False) -> None:
    """``torch.add(a, b, out=e)`` with ``e`` of size 0, captured (issue 26, item 2)."""
    a = torch.arange(4.0, device="cuda")
    b = torch.full((4,), 10.0, device="cuda")
    e = torch.empty(0, device="cuda")
    s = _side()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        g.capture_begin()
        steps["op"] = _outcome(lambda: torch.add(a, 1, out=e) if scalar else torch.add(a, b, out=e))
        steps["shape_after_capture"] = list(e.shape)
        steps["end"] = _outcome(g.capture_end)
    torch.cuda.current_stream().wait_stream(s)
    if steps["end"] == "ok":
        steps["replay"] = _outcome(g.replay)
        torch.cuda.synchronize()
        expected = a + 1 if scalar else a + b
        steps["replay_right"] = bool(torch.equal(e, expected))
    steps["later_op"] = _outcome(lambda: (torch.ones(2, device="cuda") * 2).sum().item())


def linalg_inv(steps: Steps) -> None:
    """``torch.linalg.inv`` captured in a process that never ran cuSOLVER (item 10)."""
    m = torch.eye(4, device="cuda") * 2
    s = _side()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        g.capture_begin()
        steps["op"] = _outcome(lambda: torch.linalg.inv(m))
        steps["end"] = _outcome(g.capture_end)
    torch.cuda.current_stream().wait_stream(s)
    steps["eager_after"] = _outcome(lambda: torch.linalg.inv(m).sum().item())


def begin_twice(steps: Steps) -> None:
    """A second ``capture_begin`` of the same graph during its capture (item 12)."""
    x = torch.ones(8, device="cuda")
    s = _side()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        g.capture_begin()
        y = x * 2
        steps["second_begin"] = _outcome(g.capture_begin)
        steps["end"] = _outcome(g.capture_end)
    torch.cuda.current_stream().wait_stream(s)
    if steps["end"] == "ok":
        steps["replay"] = _outcome(g.replay)
        torch.cuda.synchronize()
        steps["replay_right"] = bool(torch.equal(y, x * 2))
    del g
    gc.collect()
    steps["freed"] = "survived"


def _merge(steps: Steps, mode: str) -> None:
    x = torch.ones(8, device="cuda")
    s1, s2 = _side(), _side()
    g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    box: dict[str, Any] = {}
    with torch.cuda.stream(s1):
        g1.capture_begin(capture_error_mode=mode)
        steps["op1_g1"] = _outcome(_put(box, "y", lambda: x + 1))
        event = s1.record_event()
    with torch.cuda.stream(s2):
        g2.capture_begin(capture_error_mode=mode)
        steps["op2_g2"] = _outcome(_put(box, "z", lambda: x * 2))
    with torch.cuda.stream(s1):
        steps["op3_g1"] = _outcome(_put(box, "w", lambda: x - 1))
    with torch.cuda.stream(s2):
        steps["op4_g2"] = _outcome(_put(box, "v", lambda: x * 3))
        steps["wait"] = _outcome(lambda: s2.wait_event(event))
        steps["end_g2"] = _outcome(g2.capture_end)
    with torch.cuda.stream(s1):
        steps["end_g1"] = _outcome(g1.capture_end)
    _outcome(torch.cuda.synchronize)


def merge_global(steps: Steps) -> None:
    """Capture 2's stream waits on an event of capture 1, both "global" (item 6)."""
    _merge(steps, "global")


def merge_relaxed(steps: Steps) -> None:
    """The same with both captures "relaxed" (item 6)."""
    _merge(steps, "relaxed")


def concurrent_growth(steps: Steps) -> None:
    """Two open "global" captures; the second allocates a new segment (item 5)."""
    x = torch.ones(8, device="cuda")
    s1, s2 = _side(), _side()
    g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    box: dict[str, Any] = {}
    with torch.cuda.stream(s1):
        g1.capture_begin()
        steps["op_g1"] = _outcome(_put(box, "y", lambda: x + 1))
    with torch.cuda.stream(s2):
        g2.capture_begin()
        big = _put(box, "big", lambda: torch.empty(1 << 28, dtype=torch.uint8, device="cuda"))
        steps["big_g2"] = _outcome(big)
        steps["small_g2"] = _outcome(_put(box, "z", lambda: x * 2))
        steps["end_g2"] = _outcome(g2.capture_end)
    with torch.cuda.stream(s1):
        steps["end_g1"] = _outcome(g1.capture_end)
    _outcome(torch.cuda.synchronize)


def failed_capture_reserved(steps: Steps) -> None:
    """Reserved memory after a capture CUDA invalidated, its tensors dropped (item 7)."""
    x = torch.ones(1 << 20, device="cuda")
    gc.collect()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_reserved()
    s = _side()
    g = torch.cuda.CUDAGraph()
    box: dict[str, Any] = {}
    with torch.cuda.stream(s):
        g.capture_begin()
        box["y"] = x * 2
        steps["item"] = _outcome(lambda: box["y"].sum().item())
        steps["end"] = _outcome(g.capture_end)
    torch.cuda.current_stream().wait_stream(s)
    box.clear()
    gc.collect()
    torch.cuda.empty_cache()
    steps["reserved_growth"] = torch.cuda.memory_reserved() - before
    steps["leaked_after_failed_capture"] = steps["reserved_growth"] > 0


SCENARIOS: dict[str, Callable[[Steps], None]] = {
    "out_resize": out_resize,
    "out_resize_scalar": lambda steps: out_resize(steps, scalar=True),
    "linalg_inv": linalg_inv,
    "begin_twice": begin_twice,
    "merge_global": merge_global,
    "merge_relaxed": merge_relaxed,
    "concurrent_growth": concurrent_growth,
    "failed_capture_reserved": failed_capture_reserved,
}


def child(name: str, device: str) -> None:
    from verification.devices import device_context

    steps: Steps = {"scenario": name, "device": device}
    with device_context(device, strict_warmup=False):
        SCENARIOS[name](steps)
    print(json.dumps(steps), flush=True)


def run(name: str, device: str, timeout: float = 300) -> Steps:
    """Runs one scenario in a fresh process; its steps, plus ``rc`` (and ``stderr`` on failure)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.probes.capture_semantics",
            "--child",
            name,
            "--device",
            device,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    steps: Steps = json.loads(lines[-1]) if lines else {"scenario": name}
    steps["rc"] = done.returncode
    if done.returncode != 0 or not lines:
        steps["stderr"] = done.stderr.strip()[-600:]
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "sim"), default="cuda")
    parser.add_argument("--child", metavar="SCENARIO", help=argparse.SUPPRESS)
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help=", ".join(SCENARIOS))
    args = parser.parse_args()
    if args.child:
        child(args.child, args.device)
        return
    unknown = [n for n in args.scenarios if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario {unknown[0]!r}; choose from {', '.join(SCENARIOS)}")
    for name in args.scenarios or SCENARIOS:
        print(json.dumps(run(name, args.device)), flush=True)


if __name__ == "__main__":
    main()
