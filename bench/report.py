"""Writes one benchmark run as JSON, a Markdown summary and PNG plots into a results folder.

The JSON holds every measurement; the Markdown holds the tables a reader needs (replay, capture,
memory per k; the transformer's tokens per second; each target met or missed). Plots need
matplotlib (the ``bench`` extra); without it the PNGs are skipped and the run says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.targets import per_break_overhead

US, MS, MIB = 1e6, 1e3, 1 / 2**20


def _micro_tables(micro: dict[str, Any], floor: dict[str, float], targets: list[str]) -> list[str]:
    rows = micro["rows"]
    head = "| k | " + " | ".join(targets) + " |"
    sep = "| --- |" + " --- |" * len(targets)

    def table(title: str, cell) -> list[str]:
        lines = [f"**{title}**", "", head, sep]
        for r in rows:
            lines.append(f"| {r['breaks']} | " + " | ".join(cell(r, t) for t in targets) + " |")
        return [*lines, ""]

    def get(r: dict, key: str, scale: float, fmt: str) -> str:
        return format(r[key] * scale, fmt) if key in r else "-"

    overhead = {t: per_break_overhead(rows, t) for t in targets}
    lines = [
        f"Body: {micro['ops']} one-kernel ops on {micro['numel']} floats; medians of "
        f"{micro['rounds']} interleaved rounds x {micro['n']} replays. Floor (one graph launch "
        f"+ one eager call): {floor['floor_s'] * US:.2f} us.",
        "",
    ]
    lines += table("Replay, synced (us)", lambda r, t: get(r, f"{t}_synced_s", US, ".1f"))
    lines += table(
        "Replay, CPU side: launch only (us)", lambda r, t: get(r, f"{t}_cpu_s", US, ".1f")
    )
    lines += table(
        "Per-break overhead over one graph without breaks, synced (us)",
        lambda r, t: (
            format(overhead[t][r["breaks"]] * US, ".2f") if r["breaks"] in overhead[t] else "-"
        ),
    )
    lines += table("Capture (ms)", lambda r, t: get(r, f"{t}_capture_s", MS, ".2f"))
    lines += table("Reserved pool memory (MiB)", lambda r, t: get(r, f"{t}_pool_bytes", MIB, ".1f"))
    wrong = [
        f"{t} at k={r['breaks']}" for r in rows for t in targets if r.get(f"{t}_correct") is False
    ]
    lines += [f"Outputs equal to eager: {'all' if not wrong else 'NOT ' + ', '.join(wrong)}.", ""]
    return lines


def _transformer_table(tf: dict[str, Any]) -> list[str]:
    cfg = tf["config"]
    lines = [
        f"Decoder: {cfg['layers']} layers, d_model {cfg['d_model']}, {cfg['heads']} heads, "
        f"ffn {cfg['ffn']}, vocab {cfg['vocab']}, {cfg['seq_len']} tokens per sequence, "
        f"{cfg['dtype']}; attention is a varlen eager break reading lengths on the host.",
        "",
        "| batch | tokens | eager tok/s | library tok/s | full graph tok/s | library / eager "
        "| library / full graph | GPU idle per break (us) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in tf["rows"]:
        idle = r.get("gpu_idle_per_break_s")
        lines.append(
            f"| {r['batch']} | {r['tokens']} | {r['eager_tokens_per_s']:.0f} | "
            f"{r['library_tokens_per_s']:.0f} | {r['full_graph_tokens_per_s']:.0f} | "
            f"{r['library_tokens_per_s'] / r['eager_tokens_per_s']:.2f}x | "
            f"{r['library_tokens_per_s'] / r['full_graph_tokens_per_s']:.2f}x | "
            f"{'-' if idle is None else format(idle * US, '.0f')} |"
        )
    return [*lines, ""]


def _verdict_table(verdicts: list[dict[str, Any]]) -> list[str]:
    lines = ["| target | k | ratio | limit | met |", "| --- | --- | --- | --- | --- |"]
    for v in verdicts:
        bound = "<=" if "breakable-cuda-graphs /" not in v["target"] else ">="
        lines.append(
            f"| {v['target']} | {v['breaks']} | {v['ratio']:.3f} | {bound} {v['limit']} | "
            f"{'yes' if v['met'] else '**no**'} |"
        )
    return [*lines, ""]


def _plots(out: Path, micro: dict[str, Any], floor: dict[str, float], targets: list[str]) -> list:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    rows = micro["rows"]
    written = []
    fig, ax = plt.subplots(figsize=(6, 4))
    for t in targets:
        if t in ("eager", "torch_graph"):  # eager's whole body is eager: off the scale
            continue
        overhead = per_break_overhead(rows, t)
        if overhead:
            ks = sorted(overhead)
            ax.plot(ks, [overhead[k] * US for k in ks], marker="o", label=t)
    ax.axhline(floor["floor_s"] * US, color="gray", linestyle="--", label="floor")
    ax.set(xscale="log", xlabel="breaks", ylabel="replay overhead per break (us)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "replay_overhead.png", dpi=120)
    written.append(out / "replay_overhead.png")
    fig, ax = plt.subplots(figsize=(6, 4))
    for t in targets:
        if t in ("eager", "torch_graph"):
            continue
        ks = [r["breaks"] for r in rows if f"{t}_capture_s" in r]
        ax.plot(
            ks, [r[f"{t}_capture_s"] * MS for r in rows if f"{t}_capture_s" in r], "o-", label=t
        )
    ax.set(xscale="symlog", xlabel="breaks", ylabel="capture time (ms)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "capture_time.png", dpi=120)
    written.append(out / "capture_time.png")
    plt.close("all")
    return written


def write(out: Path, result: dict[str, Any], verdicts: list[dict[str, Any]]) -> list[Path]:
    """Write ``bench.json``, ``bench.md`` and the plots under ``out``; return the paths."""
    out.mkdir(parents=True, exist_ok=True)
    micro, floor = result["micro"], result["floor"]
    targets = [t for t in result["targets"]]
    json_path = out / "bench.json"
    json_path.write_text(json.dumps({**result, "verdicts": verdicts}, indent=2) + "\n")
    meta = result["meta"]
    lines = [
        f"# Breakable-graph benchmark ({meta['device']})",
        "",
        f"Command: `{meta['command']}`. {meta['gpu'] or 'CPU simulator'}; torch {meta['torch']}; "
        f"breakable-cuda-graphs {meta['peer'] or 'not installed'}.",
        "",
        "## Targets",
        "",
        *_verdict_table(verdicts),
        "## Replay and capture against breaks",
        "",
        *_micro_tables(micro, floor, targets),
    ]
    if result.get("transformer"):
        lines += ["## Transformer workload", "", *_transformer_table(result["transformer"])]
    md_path = out / "bench.md"
    md_path.write_text("\n".join(lines))
    return [json_path, md_path, *_plots(out, micro, floor, targets)]
