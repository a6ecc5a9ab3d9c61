"""The harness's teeth where a certificate was made: re-run the planted-bug targets of
``tests/`` in the same environment and count how many the fuzzer finds.

Each module of :data:`PLANTED_MODULES` exposes ``BUGS`` (name -> description) and
``build(bug)``; a bug counts as found when the campaign reports a target bug. Outside a
source checkout (no ``tests`` package) :func:`measure` returns None.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any

from verification.findings import fails_certificate
from verification.fuzz import CampaignConfig, run_campaign

PLANTED_MODULES = ("verification.planted.targets", "verification.planted.vllm_minimal")
# The ci profile's budget: the suite proves each planted bug is found within it.
EXAMPLES = 25
EMPTY_GRAPH_WARNING = "The CUDA Graph is empty"


def planted_targets() -> list[tuple[str, Callable[[], Any]]] | None:
    """``(module:bug, make target)`` for every planted bug, None outside a checkout."""
    found = []
    for name in PLANTED_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            return None
        found += [(f"{name}:{bug}", _builder(module, bug)) for bug in module.BUGS]
    return found


def _builder(module: Any, bug: str) -> Callable[[], Any]:
    return lambda: module.build(bug)


def measure(
    device: str, seed: int = 0, progress: Callable[[int], None] = lambda advance: None
) -> dict[str, Any] | None:
    targets = planted_targets()
    if targets is None:
        return None
    hits: dict[str, bool] = {}
    with warnings.catch_warnings():
        # The planted copies end empty segments by the hundred (one per leading or adjacent
        # break), and torch warns at each: certify's output would be nothing else.
        warnings.filterwarnings("ignore", message=EMPTY_GRAPH_WARNING, category=UserWarning)
        for name, make in targets:
            config = CampaignConfig(target=make(), device=device, examples=EXAMPLES, seed=seed)
            result = run_campaign(config)
            hits[name] = any(fails_certificate(f.kind) for f in result.findings)
            progress(1)
    return {
        "found": sum(hits.values()),
        "total": len(hits),
        "examples": EXAMPLES,
        "targets": hits,
    }
