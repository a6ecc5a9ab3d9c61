"""The harness's teeth where a certificate was made: re-run the planted-bug targets of
:mod:`verification.planted` in the same environment and count how many the fuzzer finds.

Each module of :data:`PLANTED_MODULES` exposes ``BUGS`` (name -> description) and
``build(bug)``; a bug counts as found when the campaign reports a target bug. The planted
targets ship with the package, so this measures from any install.
"""

from __future__ import annotations

import importlib
import time
import warnings
from collections.abc import Callable
from typing import Any

from verification.certify.run import CertifyRun, CheckResult
from verification.findings import fails_certificate
from verification.fuzz import CampaignConfig, run_campaign

PLANTED_MODULES = ("verification.planted.targets", "verification.planted.vllm_minimal")
# The ci profile's budget: the suite proves each planted bug is found within it.
EXAMPLES = 25
EMPTY_GRAPH_WARNING = "The CUDA Graph is empty"


def planted_targets() -> list[tuple[str, Callable[[], Any]]]:
    """``(module:bug, make target)`` for every planted bug."""
    found = []
    for name in PLANTED_MODULES:
        module = importlib.import_module(name)
        found += [(f"{name}:{bug}", _builder(module, bug)) for bug in module.BUGS]
    return found


def _builder(module: Any, bug: str) -> Callable[[], Any]:
    return lambda: module.build(bug)


def measure(
    device: str, seed: int = 0, progress: Callable[[int], None] = lambda advance: None
) -> dict[str, Any]:
    hits: dict[str, bool] = {}
    with warnings.catch_warnings():
        # The planted copies end empty segments by the hundred (one per leading or adjacent
        # break), and torch warns at each: certify's output would be nothing else.
        warnings.filterwarnings("ignore", message=EMPTY_GRAPH_WARNING, category=UserWarning)
        for name, make in planted_targets():
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


def summary_line(measured: dict[str, Any]) -> str:
    """``N of M found``, the line certify prints and the certificate's markdown shows."""
    return (
        f"planted bugs: {measured['found']} of {measured['total']} found"
        f" (same environment, {measured['examples']} examples each)"
    )


def sensitivity_check(run: CertifyRun) -> CheckResult:
    """The measurement as a check of certify's table: its result is the certificate's
    ``sensitivity`` section, not a row of its checks."""
    start = time.perf_counter()
    measured = measure(run.device, run.config.seed, run.progress)
    return CheckResult(
        "sensitivity", measured["total"], time.perf_counter() - start, section=measured
    )
