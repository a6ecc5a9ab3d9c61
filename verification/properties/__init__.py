"""Property checks that replay equality alone cannot see, one module per property.

:data:`PROPERTIES` maps each property's name to its one-line contract and its ``check``
(``CheckConfig -> CheckResult``); ``python -m verification check NAME|all`` and certify run
them from this table. Adding a property means adding one module and one row here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verification.findings import Finding
from verification.programs import Program
from verification.properties import (
    engine,
    faults,
    nested,
    pool,
    repetition,
    runner,
    stream_order,
    threads,
)
from verification.properties.base import CheckConfig, CheckResult


@dataclass(frozen=True)
class Property:
    name: str
    contract: str
    check: Callable[[CheckConfig], CheckResult]
    # Re-checks one program under a finding's scenario: what a reproducer script runs.
    example: Callable[[Program, dict[str, Any], CheckConfig], str | None]


PROPERTIES: dict[str, Property] = {
    p.name: p
    for p in (
        Property(
            pool.NAME,
            "captures sharing a pool replay correctly in order, cost one pool, hold nothing dropped",
            pool.check,
            pool.example,
        ),
        Property(
            nested.NAME,
            "nested captures raise and leave the outer capture intact; nested breaks run inline",
            nested.check,
            nested.example,
        ),
        Property(
            threads.NAME,
            "captures are per thread: other threads run eagerly and capture on their own; a "
            "capture built in one thread captures, replays and resets in another",
            threads.check,
            threads.example,
        ),
        Property(
            faults.NAME,
            "an exception anywhere propagates and leaves nothing capturing, active or broken",
            faults.check,
            faults.example,
        ),
        Property(
            stream_order.NAME,
            "eager steps are ordered with the graphs around them on the caller's stream",
            stream_order.check,
            stream_order.example,
        ),
        Property(
            repetition.NAME,
            "many cycles of capture, replay and reset keep reserved memory flat",
            repetition.check,
            repetition.example,
        ),
        Property(
            runner.NAME,
            "a runner captures once per input signature, replays repeats, equals eager, and takes "
            "its arguments as documented",
            runner.check,
            runner.example,
        ),
        Property(
            engine.NAME,
            "an engine's runner loop (one pool, every batch size, any order, host metadata, "
            "a logits processor) replays as eager",
            engine.check,
            engine.example,
        ),
    )
}

__all__ = ["PROPERTIES", "CheckConfig", "CheckResult", "Finding", "Property"]
