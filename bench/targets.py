"""The performance targets, judged from one run's measurements.

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


def added_s(cells: dict[str, Any], target: str, k: int) -> float:
    """Replay time k breaks add over k = 0 in one side-stream round: the median of paired
    differences, or (results written before pairing) the difference of the two medians."""
    cell = cells[str(k)][target]
    if "added_s" in cell:
        return cell["added_s"]
    return cell["synced_s"] - cells["0"][target]["synced_s"]


def _within(lib: float, ref: float, ratio: float, slack: float) -> tuple[float, bool]:
    """lib / ref, and whether lib is within ``ratio`` times ref or ``slack`` seconds of it."""
    value = lib / ref if ref > 0 else float("inf")
    return value, lib <= max(ratio * ref, ref + slack)


def judge_side_stream(side: dict[str, Any]) -> list[dict[str, Any]]:
    """The side-stream scenario's targets, judged in every round: the worst
    round's ratio is reported, and a target is met only if it is met in every round."""
    found: dict[tuple[str, int], tuple[float, bool, float]] = {}

    def note(name: str, k: int, value: float, met: bool, limit: float) -> None:
        old = found.get((name, k))
        worst = value if old is None else max(old[0], value)
        found[(name, k)] = (worst, met and (old is None or old[1]), limit)

    for rnd in side["rounds"]:
        cells = rnd["k"]
        if "0" not in cells or "library" not in cells["0"] or "minimal" not in cells["0"]:
            continue

        def added(target: str, k: int, cells: dict = cells) -> float:
            return added_s(cells, target, k)

        if "1" in cells:
            value, met = _within(added("library", 1), added("minimal", 1), 1.05, 2e-6)
            note(
                "side stream: added replay at k=1, library / minimal (or +2 us)",
                1,
                value,
                met,
                1.05,
            )
        for k in (4, 16):
            if str(k) in cells:
                value, met = _within(added("library", k), added("minimal", k), 1.05, 0.0)
                note("side stream: per break, library / minimal", k, value, met, 1.05)
        if "255" in cells:
            lib = cells["255"]["library"]["capture_s"]
            value, met = _within(lib, cells["255"]["minimal"]["capture_s"], 1.1, 0.0)
            note("side stream: capture, library / minimal", 255, value, met, 1.1)
    return [
        {"target": name, "breaks": k, "ratio": value, "limit": limit, "met": bool(met)}
        for (name, k), (value, met, limit) in found.items()
    ]


def judge_transformer(tf: dict[str, Any]) -> list[dict[str, Any]]:
    """The transformer's target: the library with non-syncing breaks within 1.25 times one
    full graph's time per forward, at every batch size."""
    return [
        _record(
            "transformer, breaks not syncing: library / full graph time per forward",
            r["batch"],
            r["library_nosync_s"] / r["full_graph_s"],
            1.25,
            True,
        )
        for r in tf["rows"]
        if "library_nosync_s" in r
    ]
