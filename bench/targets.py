"""The issue's performance targets, judged from one run's measurements.

Each target is a named ratio of two numbers measured in the same process, with a limit and a
direction. ``judge(micro, floor)`` returns one record per target and k: the ratio, the limit and
whether it was met. Per-break overhead at k is ``(replay(k) - one_graph_replay(0)) / k``.
"""

from __future__ import annotations

from typing import Any


def per_break_overhead(rows: list[dict[str, Any]], target: str, key: str = "synced") -> dict:
    """k -> seconds each break adds to ``target``'s replay over one graph without breaks."""
    base = next(r for r in rows if r["breaks"] == 0)[f"torch_graph_{key}_s"]
    return {
        r["breaks"]: (r[f"{target}_{key}_s"] - base) / r["breaks"]
        for r in rows
        if r["breaks"] > 0 and f"{target}_{key}_s" in r
    }


def _record(name: str, k: int | None, ratio: float, limit: float, at_most: bool) -> dict:
    met = ratio <= limit if at_most else ratio >= limit
    return {"target": name, "breaks": k, "ratio": ratio, "limit": limit, "met": bool(met)}


def judge(micro: dict[str, Any], floor: dict[str, float]) -> list[dict[str, Any]]:
    rows = micro["rows"]
    by_k = {r["breaks"]: r for r in rows}
    out = []
    if 0 in by_k and "library_synced_s" in by_k[0]:
        r = by_k[0]
        out.append(
            _record(
                "replay, 0 breaks: library / torch.cuda.graph",
                0,
                r["library_synced_s"] / r["torch_graph_synced_s"],
                1.02,
                True,
            )
        )
    lib = per_break_overhead(rows, "library")
    ref = per_break_overhead(rows, "minimal")
    for k in sorted(lib):
        if k in ref:
            out.append(
                _record(
                    "per-break overhead: library / minimal",
                    k,
                    lib[k] / ref[k] if ref[k] > 0 else float("inf"),
                    1.05,
                    True,
                )
            )
    if lib:
        k = max(lib)
        out.append(
            _record("per-break overhead: library / floor", k, lib[k] / floor["floor_s"], 1.05, True)
        )
    for k, r in sorted(by_k.items()):
        if k >= 64 and "library_capture_s" in r and "minimal_capture_s" in r:
            out.append(
                _record(
                    "capture: library / minimal",
                    k,
                    r["library_capture_s"] / r["minimal_capture_s"],
                    1.1,
                    True,
                )
            )
            if "peer_capture_s" in r:
                out.append(
                    _record(
                        "capture: breakable-cuda-graphs / library",
                        k,
                        r["peer_capture_s"] / r["library_capture_s"],
                        1.3,
                        False,
                    )
                )
    for k, r in sorted(by_k.items()):
        if r.get("torch_graph_pool_bytes"):
            out.append(
                _record(
                    "reserved pool memory: library / one graph",
                    k,
                    r["library_pool_bytes"] / r["torch_graph_pool_bytes"],
                    1.05,
                    True,
                )
            )
    return out
