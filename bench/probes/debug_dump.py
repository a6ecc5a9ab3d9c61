"""GPU probe: when ``CUDAGraph.debug_dump`` writes its DOT file.

On the H200 (torch 2.11, call D of 2026-12-03) a graph made with ``enable_debug_mode()``
before ``capture_begin`` and dumped after ``capture_end`` wrote no file; torch warned only
"DEBUG: calling debug_dump()". This probe tries the variants (``keep_graph``, dumping
before or after ``instantiate``/``replay``, the debug mode enabled before or after capture)
and prints one JSON line each: whether the file exists and the warnings torch gave. It also
asks whether a clean capture clears the generator left in capture mode by a failed one.
Run on a GPU machine: ``python -m bench.probes.debug_dump``.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings

import torch


def dump_variant(keep_graph: bool, debug_before: bool, when: str) -> dict[str, object]:
    x = torch.ones(64, device="cuda")
    g = torch.cuda.CUDAGraph(keep_graph=keep_graph)
    if debug_before:
        g.enable_debug_mode()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        g.capture_begin()
        x + 1
        g.capture_end()
    torch.cuda.current_stream().wait_stream(s)
    if not debug_before:
        g.enable_debug_mode()
    if when == "after_instantiate" and keep_graph:
        g.instantiate()
    if when == "after_replay":
        g.replay()
        torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "g.dot")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            g.debug_dump(path)
            error = None
        except Exception as raised:
            error = str(raised).splitlines()[0]
    return {
        "keep_graph": keep_graph,
        "debug_before": debug_before,
        "when": when,
        "file": os.path.exists(path) and os.path.getsize(path) > 0,
        "error": error,
        "warnings": [str(w.message).split(" (Triggered")[0] for w in caught],
    }


def generator_cleared_by_clean_capture() -> dict[str, str]:
    x = torch.ones(16, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    record: dict[str, str] = {}
    with torch.cuda.stream(s):
        bad = torch.cuda.CUDAGraph()
        bad.capture_begin()
        x * 2
        try:
            torch.cuda.synchronize()
        except Exception:
            pass
        try:
            bad.capture_end()
        except Exception as error:
            record["bad_end"] = str(error).splitlines()[0]
    for label in ("rand_after_failed", "rand_after_clean_capture"):
        if label == "rand_after_clean_capture":
            good = torch.cuda.CUDAGraph()
            with torch.cuda.stream(s):
                good.capture_begin()
                x + 1
                good.capture_end()
        try:
            torch.rand(4, device="cuda")
            torch.cuda.synchronize()
            record[label] = "ok"
        except Exception as error:
            record[label] = str(error).splitlines()[0]
    return record


def main() -> None:
    for keep_graph in (False, True):
        for debug_before in (True, False):
            for when in ("after_end", "after_instantiate", "after_replay"):
                print(json.dumps(dump_variant(keep_graph, debug_before, when)), flush=True)
    print(json.dumps(generator_cleared_by_clean_capture()), flush=True)


if __name__ == "__main__":
    main()
