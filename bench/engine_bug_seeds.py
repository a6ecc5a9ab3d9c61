"""Which campaign seeds find each planted engine bug on this machine's device.

``tests/harness/test_engine_programs.py`` runs one seed per bug (40 examples of at most 4
steps); a seed that finds a bug on the simulator may not on a GPU, where values and memory
reuse differ. This prints, per bug, the seeds that find it, so the test can pick one that
does on both. Usage: ``python -m bench.engine_bug_seeds [--seeds 0-7] [--device cuda]``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from verification.devices import resolve_kind
from verification.fuzz import CampaignConfig, run_campaign
from verification.planted.targets import ENGINE_BUGS, build
from verification.targets import load_target


def _seeds(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-7", help="a seed or a range, e.g. 0-7")
    parser.add_argument("--device", default="auto", choices=("auto", "cuda", "sim"))
    parser.add_argument("--examples", type=int, default=40)
    args = parser.parse_args()
    kind = resolve_kind(args.device)
    for bug in ENGINE_BUGS:
        found = []
        for seed in _seeds(args.seeds):
            with tempfile.TemporaryDirectory() as report_dir:
                config = CampaignConfig(
                    target=load_target(build(bug)),
                    kind=kind,
                    examples=args.examples,
                    max_ops=4,
                    seed=seed,
                    report_dir=Path(report_dir),
                    database=None,
                )
                if run_campaign(config).findings:
                    found.append(seed)
        print(f"{bug} on {kind}: found at seeds {found} of {args.seeds}", flush=True)


if __name__ == "__main__":
    main()
