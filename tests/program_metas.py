"""The meta every value of a program should have, from the ops' ``infer``: what the tests
compare eager runs against."""

from __future__ import annotations

from collections.abc import Sequence

from verification.ops.spec import OpSpec, TensorMeta
from verification.programs import Program, op_table, produces_value


def value_metas(program: Program, ops: Sequence[OpSpec] | None = None) -> list[TensorMeta]:
    """The meta of every value the program defines, inputs first."""
    table = op_table(ops)
    metas = list(program.inputs)
    for step in program.steps:
        spec = table[step.op]
        out = spec.infer([metas[a] for a in step.args], step.kwargs)
        if produces_value(spec):
            assert isinstance(out, TensorMeta)
            metas.append(out)
    return metas
