"""Plots issue 23's H200 figures: replay time against k for the three implementations.

Left, the issue's protocol (``launch_state --part issue``) in two fresh processes, one per order:
whichever implementation runs first has its k = 0 timed before the process-wide state change.
Right, a side-stream run (``side_stream.run``'s JSON, or ``python -m bench``'s ``bench.json``):
median over rounds with bars to min and max. Needs matplotlib.
``python -m bench.probes.plot_first_break ISSUE_FWD ISSUE_REV SIDE_JSON OUT_PNG``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("error: give ISSUE_FWD.json ISSUE_REV.json SIDE.json OUT.png", file=sys.stderr)
        return 2
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fwd, rev, side_path, out = (Path(a) for a in argv)
    side = json.loads(side_path.read_text())
    side = side.get("side_stream", side)
    colors = {"minimal": "tab:blue", "peer": "tab:green", "library": "tab:red"}
    names = {"minimal": "minimal", "peer": "breakable-cuda-graphs", "library": "this library"}
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for path, style, label in ((fwd, "-", "order minimal, peer, library"), (rev, "--", "reversed")):
        rows = json.loads(path.read_text())
        first = rows[0]["target"]
        for target in colors:
            mine = [r for r in rows if r["target"] == target]
            left.plot(
                [r["k"] for r in mine],
                [r["synced_s"] * 1e6 for r in mine],
                style,
                marker="o",
                color=colors[target],
                label=f"{names[target]} ({label}{', first' if target == first else ''})",
            )
    left.set(
        xscale="symlog",
        yscale="log",
        xlabel="breaks k",
        ylabel="replay, synced median of 200 (us)",
        title="issue protocol, fresh process per order",
    )
    left.legend(fontsize=6.5)
    for target in side["targets"]:
        ks = [k for k in side["breaks"] if str(k) in side["summary"][target]]
        cells = [side["summary"][target][str(k)]["synced_s"] for k in ks]
        med = [c["median"] * 1e6 for c in cells]
        err = [
            [(c["median"] - c["min"]) * 1e6 for c in cells],
            [(c["max"] - c["median"]) * 1e6 for c in cells],
        ]
        right.errorbar(
            ks, med, yerr=err, marker="o", capsize=3, color=colors[target], label=names[target]
        )
    right.set(
        xscale="symlog",
        xlabel="breaks k",
        title=f"side-stream scenario, {len(side['rounds'])} interleaved rounds (median, min-max)",
    )
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
