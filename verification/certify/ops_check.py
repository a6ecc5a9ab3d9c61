"""The ``ops`` check of ``certify --ops MODULE:SPEC``: each registered break op, fuzzed.

For the ops named with ``--ops`` it runs what ``fuzz-op`` runs: the contract diagnosis,
then a campaign whose every program calls the ops, and reports contract violations and
campaign findings that are an op's fault as ``op-bug`` findings, which fail the certificate
(it goes with the op's pull request), and the calls per break position as coverage.
"""

from __future__ import annotations

import dataclasses
import time

from verification.certify.run import CertifyRun, CheckResult
from verification.fuzz import run_campaign
from verification.userops.campaign import (
    DEFAULT_MAX_BREAKS,
    DEFAULT_MAX_OPS,
    contract_violations,
    op_campaign,
    render_contract_reproducer,
    settle_findings,
)

CONTRACT_EXAMPLES = 5


def ops_check(run: CertifyRun) -> CheckResult:
    """Diagnoses and fuzzes ``run.users`` against ``run.target``, under its contract."""
    start = time.perf_counter()
    # Small base programs: the fuzz check covers big ones; here the op is what varies.
    base = dataclasses.replace(run.config, max_ops=DEFAULT_MAX_OPS, max_breaks=DEFAULT_MAX_BREAKS)
    op_config, coverage = op_campaign(base, run.op_specs, run.users, CONTRACT_EXAMPLES)
    violations = contract_violations(
        run.users, run.target, run.kind, CONTRACT_EXAMPLES, run.config.seed
    )
    # Each names its op: several ops may break the same part.
    findings = [
        dataclasses.replace(v, message=f"op {ref}: {v.message}", seed=run.config.seed)
        for ref, found in violations.items()
        for v in found
    ]
    command = op_config.command()
    reproducers = [
        render_contract_reproducer(ref, v, run.kind, command, run.target)
        for ref, found in violations.items()
        for v in found
    ]
    result = run_campaign(op_config, progress=run.progress)
    # A campaign finding that is the op's fault is an op-bug: the certificate goes with the
    # op's pull request too, so it fails, naming the op.
    settle_findings(result, op_config, run.users)
    counts = {
        f"{ref} {key}": value
        for ref, per_op in coverage.as_dict().items()
        for key, value in per_op.items()
    }
    return CheckResult(
        "ops",
        result.examples,
        time.perf_counter() - start,
        findings + list(result.findings),
        {"registered_ops": counts},
        reproducers + list(result.reproducers),
    )
