"""Whether a cause persists once the causes found beside it are avoided: two findings are
counted as two bugs only if the second fails in its own way.

A drawn finding's example is shrunk to what its own failure needs. Checked again as the fuzzer
checks a program (captured and replayed alone, against eager), an example that already fails
with another cause's failure cannot be freed of that cause and still fail: whatever the check
that drew it saw, it saw through that cause. And where a cause names a construct a program can
do without (:data:`AVOIDING`: a break handed a tensor in another dtype needs tensors of other
dtypes than the default), the example is rewritten without it: one that then replays clean
failed through that cause. :func:`avoided_joins` names such findings and the cause they join;
:func:`~verification.findings.root_causes` then counts them once. An example that fails in its
own way either way persists, and stays a cause of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import torch

from verification import bounds
from verification.causes import Cause
from verification.devices import device_context
from verification.divergence import layout_cause
from verification.findings import Finding, RootCause, root_causes
from verification.fuzz import CampaignConfig
from verification.ops.spec import TensorMeta
from verification.oracle import FUZZ, check_program
from verification.programs import Program

# Examples checked again per cause: the first few findings that carry one are enough to tell.
EXAMPLES_PER_CAUSE = 3


def _inputs_in_default_dtype(program: Program) -> Program:
    default = torch.get_default_dtype()
    inputs = tuple(TensorMeta(meta.shape, default) for meta in program.inputs)
    return dataclasses.replace(program, inputs=inputs)


# A cause -> how to take its construct out of a program.
AVOIDING: dict[Cause, Callable[[Program], Program]] = {
    layout_cause(["dtype"]): _inputs_in_default_dtype,
}


def _keys(cause: RootCause) -> set[tuple[str, ...]]:
    return {key for f in (cause.finding, *cause.others) for key in f.keys()}


def avoided_joins(
    findings: Sequence[Finding], config: CampaignConfig
) -> list[tuple[Finding, Finding]]:
    """``(a finding, the finding shown for the cause it joins)``, one per cause that does not
    persist: a drawn finding of a check other than the fuzzer's whose example, checked
    alone, fails as another cause's findings do; else the cause's first example, which
    replays clean once another cause's construct is taken out of it (:func:`_avoiding`)."""
    causes = root_causes(findings)
    if len(causes) < 2:
        return []
    keys = [_keys(cause) for cause in causes]
    joins: list[tuple[Finding, Finding]] = []
    with device_context(config.kind) as device:
        for number, cause in enumerate(causes):
            drawn = [
                f
                for f in (cause.finding, *cause.others)
                if f.program is not None and f.check != FUZZ
            ]
            joined = None
            for finding in drawn[:EXAMPLES_PER_CAUSE]:
                alone = _alone(finding, finding.program, config, device)
                if alone is None:
                    continue
                other = next(
                    (i for i, k in enumerate(keys) if i != number and k & set(alone.keys())), None
                )
                if other is not None:
                    joined = (finding, causes[other].finding)
                    break
            joined = joined or _avoiding(cause, causes, config, device)
            if joined is not None:
                joins.append(joined)
    return joins


def _avoiding(
    cause: RootCause, causes: list[RootCause], config: CampaignConfig, device: str
) -> tuple[Finding, Finding] | None:
    """``cause``'s first example that fails only with another cause's construct in it: it
    replays clean alone once that construct is taken out (:data:`AVOIDING`)."""
    example = next((f for f in (cause.finding, *cause.others) if f.program is not None), None)
    if example is None or example.program is None:
        return None
    for other in causes:
        group = (other.finding, *other.others)
        avoid = next((AVOIDING[f.cause] for f in group if f.cause in AVOIDING), None)
        if other is cause or avoid is None:
            continue
        rewritten = avoid(example.program)
        if rewritten == example.program:
            continue  # the example never had the construct
        if _replays_clean(example, rewritten, config, device):
            return example, other.finding
    return None


def _checked_alone(
    finding: Finding, program: Program, config: CampaignConfig, device: str
) -> tuple[bool, Finding | None]:
    """``program`` (``finding``'s example, or a rewrite of it) captured and replayed alone:
    whether the oracle could run it, and what it found."""
    try:
        with bounds.bounded("a finding's example, checked alone"):
            return True, check_program(
                program, config.target, device, finding.seed or 0, config.replays, config.ops
            )
    except (Exception, bounds.Hang):  # an example the oracle cannot run says nothing here
        return False, None


def _alone(
    finding: Finding, program: Program, config: CampaignConfig, device: str
) -> Finding | None:
    """The failure ``program`` shows captured and replayed alone, or None."""
    _, alone = _checked_alone(finding, program, config, device)
    return alone if alone is not None and alone.fails else None


def _replays_clean(finding: Finding, program: Program, config: CampaignConfig, device: str) -> bool:
    ran, alone = _checked_alone(finding, program, config, device)
    return ran and alone is None
