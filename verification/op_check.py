"""The ``ops`` check of ``certify --ops MODULE:SPEC``: each registered break op, fuzzed.

For the ops named with ``--ops`` it runs what ``fuzz-op`` runs: the contract diagnosis,
then a campaign whose every program calls the ops, and reports contract violations and
campaign findings that are the op's fault as ``op-bug`` findings, which fail the
certificate (it goes with the op's pull request), and the calls per break position as coverage.
"""

from __future__ import annotations

import argparse
import time

from verification.checks import CertifyRun, CheckResult
from verification.finding_kinds import OP_BUG
from verification.fuzz import run_campaign
from verification.fuzz_op import (
    DEFAULT_MAX_BREAKS,
    DEFAULT_MAX_OPS,
    campaign_config,
    contract_violations,
    load_user_ops,
    render_contract_reproducer,
    settle_findings,
)
from verification.oracle import Finding
from verification.programs import Program

CONTRACT_EXAMPLES = 5


def ops_check(run: CertifyRun) -> CheckResult:
    """Diagnoses and fuzzes ``run.op_specs`` against ``run.target``, under its contract."""
    start = time.perf_counter()
    config = run.config
    users = load_user_ops(run.op_specs)
    # Small base programs: the fuzz check covers big ones; here the op is what varies.
    args = argparse.Namespace(
        specs=list(run.op_specs),
        target=config.target,
        contract=config.contract,
        device=config.device,
        examples=config.examples,
        seed=config.seed,
        max_ops=DEFAULT_MAX_OPS,
        max_breaks=DEFAULT_MAX_BREAKS,
        replays=config.replays,
        report=config.report_dir,
        program_file=None,
        contract_examples=CONTRACT_EXAMPLES,
    )
    op_config, coverage = campaign_config(args, users, run.target, run.device)
    violations = contract_violations(users, run.target, run.device, CONTRACT_EXAMPLES, config.seed)
    findings = [
        Finding(v.part, f"op {ref}: {v.message}", Program((), (), ()), config.seed, kind=OP_BUG)  # type: ignore[arg-type]
        for ref, found in violations.items()
        for v in found
    ]
    command = op_config.command(run.target.name, run.device)
    reproducers = [
        render_contract_reproducer(ref, v, run.device, command, run.target)
        for ref, found in violations.items()
        for v in found
    ]
    result = run_campaign(op_config, progress=run.progress)
    settle_findings(result, op_config, users, run.target, run.device)
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
