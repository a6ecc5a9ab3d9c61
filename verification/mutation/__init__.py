"""Mutation testing: how much of a target's behaviour the harness pins down.

``run_mutation`` asks cosmic-ray for first-order mutants of a target's source, applies each to
a scratch copy of the target's package (never the installed one), runs the harness commands
(and optionally a unit-test command first) against it in a subprocess with a timeout, and
returns which mutants were killed, by what, and hints for survivors that look equivalent.
"""

from verification.mutation.engine import MutationConfig, MutationResult, run_mutation

__all__ = ["MutationConfig", "MutationResult", "run_mutation"]
