"""A private op catalog and one hand-written program with two breaks, for the oracle and
contract tests: they do not depend on the shipped ops, so a catalog change cannot move them."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from verification.ops.spec import OpSpec, TensorMeta
from verification.programs import Program, Step


def _same_float(metas, params):
    return metas[0] if all(m == metas[0] for m in metas) else None


def _applies(metas, params):
    return True


_SCALE = st.fixed_dictionaries({"alpha": st.sampled_from([2.0])})
# A private catalog, so that these hand-written programs do not depend on the shipped ops.
OPS = (
    OpSpec("add", 2, _same_float, "torch.add({0}, {1})", run=torch.add),
    OpSpec("neg", 1, _same_float, "torch.neg({0})", run=torch.neg),
    OpSpec(
        "host_scale",
        1,
        _same_float,
        "host_scale({0})",
        kind="break",
        entry="host_scale",
        params=lambda metas: _SCALE,
        source="@eager_break_during_capture\ndef host_scale(x, alpha=1.0):\n    return x * alpha + 1\n",
    ),
    OpSpec(
        "double_",
        1,
        _applies,
        "double_({0})",
        kind="break",
        entry="double_",
        outputs=0,
        aliasing="inplace",
        mutates=(0,),
        source="@eager_break_during_capture\ndef double_(x):\n    x.mul_(2)\n",
    ),
)
F32 = TensorMeta((4,), torch.float32)


def _program(*steps: Step, outputs: tuple[int, ...]) -> Program:
    return Program((F32, F32), steps, outputs)


# in0 -> neg -> host_scale(brk) -> add(in1) -> double_(brk) ; output the sum
TWO_BREAKS = _program(
    Step("neg", (0,), (), False),
    Step("host_scale", (2,), (("alpha", 2.0),), True),
    Step("add", (3, 1), (), False),
    Step("double_", (4,), (), True),
    outputs=(4,),
)
