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


def _us(value: float | None, fmt: str = ".0f") -> str:
    return "-" if value is None else format(value * US, fmt)


def _transformer_table(tf: dict[str, Any]) -> list[str]:
    cfg = tf["config"]
    lines = [
        f"Decoder: {cfg['layers']} layers, d_model {cfg['d_model']}, {cfg['heads']} heads, "
        f"ffn {cfg['ffn']}, vocab {cfg['vocab']}, {cfg['seq_len']} tokens per sequence, "
        f"{cfg['dtype']}; attention is one varlen eager break per layer. Syncing: the break "
        "reads the lengths from the device (`.tolist()`). Not syncing: the host prepares the "
        "lengths before each forward and the break reads them there.",
        "",
        "| batch | tokens | eager tok/s | library tok/s | eager, no sync tok/s "
        "| library, no sync tok/s | full graph tok/s | library / full graph time "
        "| library, no sync / full graph time | GPU idle per break (us) "
        "| GPU idle per break, no sync (us) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in tf["rows"]:
        nosync = r.get("library_nosync_tokens_per_s")
        lines.append(
            f"| {r['batch']} | {r['tokens']} | {r['eager_tokens_per_s']:.0f} | "
            f"{r['library_tokens_per_s']:.0f} | "
            f"{r.get('eager_nosync_tokens_per_s', float('nan')):.0f} | "
            f"{float('nan') if nosync is None else nosync:.0f} | "
            f"{r['full_graph_tokens_per_s']:.0f} | "
            f"{r['library_s'] / r['full_graph_s']:.2f}x | "
            f"{r.get('library_nosync_s', float('nan')) / r['full_graph_s']:.2f}x | "
            f"{_us(r.get('gpu_idle_per_break_s'))} | "
            f"{_us(r.get('nosync_gpu_idle_per_break_s'), '.1f')} |"
        )
    return [*lines, ""]


def _spread_cell(entry: dict[str, Any], key: str, scale: float = US, fmt: str = ".1f") -> str:
    if key not in entry:
        return "-"
    v = entry[key]
    return f"{v['median'] * scale:{fmt}} [{v['min'] * scale:{fmt}}, {v['max'] * scale:{fmt}}]"


def _side_stream_tables(side: dict[str, Any]) -> list[str]:
    setup, summary = side["setup"], side["summary"]
    targets = side["targets"]
    lines = [
        f"Body: {setup['ops']} in-place one-kernel ops on {setup['numel']} floats; k breaks "
        "`y.add_(0.0)`; capture and replay inside `torch.cuda.stream(s)`, a fresh capture per "
        f"target, k and round; {setup['rounds']} interleaved rounds (rotated and reversed "
        f"orders), each capture {setup['warmup']} warm-ups, then {setup['n']} pairs of synced "
        "replays (`replay(); synchronize()`), the k = 0 capture and the k capture back to back; "
        "added time is the median of the pairs' differences. Cells: median over rounds [min, "
        "max] of each round's figure. Correct (one replay equals eager): "
        + ", ".join(f"{t} {'yes' if ok else 'NO'}" for t, ok in side["correct"].items())
        + ".",
        "",
    ]
    state = side.get("state_gpu_s")
    if state:
        per_round = ", ".join(_us(r.get("state_gpu_s"), ".1f") for r in side["rounds"])
        lines += [
            "Process state probe (GPU span of a plain 256-kernel graph on `s`, us): "
            f"{_us(state['before_priming'], '.1f')} before priming, "
            f"{_us(state['after_priming'], '.1f')} after "
            f"({'each target captured and replayed once with one break' if side['setup'].get('primed') else 'not primed'}); "
            f"at the start of each round: {per_round}.",
            "",
        ]
    ks = side["breaks"]

    def table(title: str, key: str, scale: float = US, fmt: str = ".1f") -> list[str]:
        out = [f"**{title}**", "", "| k | " + " | ".join(targets) + " |"]
        out.append("| --- |" + " --- |" * len(targets))
        for k in ks:
            cells = [_spread_cell(summary[t].get(str(k), {}), key, scale, fmt) for t in targets]
            out.append(f"| {k} | " + " | ".join(cells) + " |")
        return [*out, ""]

    lines += table("Replay, synced (us)", "synced_s")
    lines += table("Added replay time over k = 0, same round (us)", "added_s")
    lines += table("Per break: added time / k (us)", "per_break_s", fmt=".2f")
    lines += table("Replay, CPU side: launch only, no sync (us)", "launch_cpu_s")
    lines += table(
        "CPU time of one cudaGraphLaunch, segments launched one by one (us)",
        "graph_launch_cpu_s",
        fmt=".2f",
    )
    lines += table("Capture (ms)", "capture_s", scale=MS, fmt=".2f")
    profiled = side.get("profiled_graph_launch_cpu_s") or {}
    if profiled:
        lines += [
            "**CPU time per cudaGraphLaunch under torch.profiler (us; CUPTI's hooks inflate "
            "it by about 1 us per graph node)**",
            "",
            "| k | " + " | ".join(targets) + " |",
            "| --- |" + " --- |" * len(targets),
        ]
        for k in ks:
            lines.append(
                f"| {k} | "
                + " | ".join(_us(profiled.get(t, {}).get(str(k)), ".1f") for t in targets)
                + " |"
            )
        lines.append("")
    return lines


def _verdict_table(verdicts: list[dict[str, Any]]) -> list[str]:
    lines = ["| target | k | ratio | limit | met |", "| --- | --- | --- | --- | --- |"]
    for v in verdicts:
        bound = "<=" if "breakable-cuda-graphs /" not in v["target"] else ">="
        lines.append(
            f"| {v['target']} | {v['breaks']} | {v['ratio']:.3f} | {bound} {v['limit']} | "
            f"{'yes' if v['met'] else '**no**'} |"
        )
    return [*lines, ""]


def _side_stream_plot(plt: Any, out: Path, side: dict[str, Any]) -> Path:
    """Replay time against k for each implementation: median over rounds, bars to min and max."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for t in side["targets"]:
        ks = [k for k in side["breaks"] if str(k) in side["summary"][t]]
        cells = [side["summary"][t][str(k)]["synced_s"] for k in ks]
        med = [c["median"] * US for c in cells]
        low = [(c["median"] - c["min"]) * US for c in cells]
        high = [(c["max"] - c["median"]) * US for c in cells]
        ax.errorbar(ks, med, yerr=[low, high], marker="o", capsize=3, label=t)
    ax.set(
        xscale="symlog",
        yscale="log",
        xlabel="breaks k",
        ylabel="replay, synced (us)",
        title="side stream: 256 ops, replay time against k",
    )
    ax.legend()
    fig.tight_layout()
    path = out / "side_stream_replay.png"
    fig.savefig(path, dpi=120)
    return path


def _plots(
    out: Path,
    micro: dict[str, Any],
    floor: dict[str, float],
    targets: list[str],
    side: dict[str, Any] | None = None,
) -> list:
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
    if side is not None:
        written.append(_side_stream_plot(plt, out, side))
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
    if result.get("side_stream"):
        lines += [
            "## Side stream, fresh capture per k",
            "",
            *_side_stream_tables(result["side_stream"]),
        ]
    if result.get("transformer"):
        lines += ["## Transformer workload", "", *_transformer_table(result["transformer"])]
    md_path = out / "bench.md"
    md_path.write_text("\n".join(lines))
    return [json_path, md_path, *_plots(out, micro, floor, targets, result.get("side_stream"))]
