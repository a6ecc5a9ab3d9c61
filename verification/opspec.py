"""Where a break op's spec was imported from before the harness grew its ``userops`` package;
kept so that spec files written then still import. New code: ``from verification import
BreakOpSpec, TensorArg``."""

from verification.userops.spec import (  # noqa: F401
    BreakOpSpec,
    LoadedSpec,
    TensorArg,
    WriteMask,
    load_spec,
    validate,
)
