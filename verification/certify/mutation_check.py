"""The mutation phase of ``certify --mutants N``: the harness's score on N mutants of the target.

It returns a :class:`~verification.certify.run.CheckResult` like every other check: no findings
(a surviving mutant is not a bug of the target), and the counts under the ``mutation`` key of
the certificate's coverage, so the certificate says how much of *this* target's behaviour
the harness pins down in this environment.
"""

from __future__ import annotations

import time

from verification.certify.run import CertifyRun, CheckResult
from verification.mutation.engine import MutationConfig, run_mutation


def mutation_check(run: CertifyRun) -> CheckResult:
    start = time.perf_counter()
    # The mutants run in children that import the mutated source: they need the module's name.
    result = run_mutation(
        MutationConfig(
            target=run.target.name,
            kind=run.kind,
            budget=run.mutants,
            seed=run.config.seed,
            on_judged=run.progress,
        )
    )
    counts = {
        "killed": len(result.killed),
        "survived": len(result.survivors),
        "available": result.available,
        "score_percent": round(100 * result.score),
    }
    return CheckResult(
        "mutation", len(result.mutants), time.perf_counter() - start, [], {"mutation": counts}
    )
