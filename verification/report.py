"""Turns a finding into a standalone Python reproducer script.

The script imports only torch and the target (plus the simulator when the finding came
from it), defines each break from the op's ``source`` text, spells every step with the
op's ``expr``, captures, replays and asserts against an eager run of the same code. It
exits non-zero while the bug is present and prints a pass line once it is fixed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from verification.findings import Finding
from verification.ops.spec import OpSpec
from verification.oracle import program_tolerance
from verification.programs import Program, input_expr, op_table, produces_value
from verification.targets import Target

_PRELUDE = '''
CALLS = []
_depth = [0]


def logged_break(step):
    """Logs one call per break step (nested calls excluded), then applies the target's decorator."""

    def decorate(fn):
        @functools.wraps(fn)
        def logged(*args, **kwargs):
            if _depth[0] == 0:
                leaves = torch.utils._pytree.tree_flatten((args, kwargs))[0]
                tensors = [a for a in leaves if isinstance(a, torch.Tensor)]
                CALLS.append((step, tuple(t.data_ptr() for t in tensors)))
            _depth[0] += 1
            try:
                return fn(*args, **kwargs)
            finally:
                _depth[0] -= 1

        return target.eager_break_during_capture(logged)

    return decorate
'''

_CHECK = """

def seed_rng(seed):
    torch.manual_seed(seed)
    if DEVICE == "cuda":
        torch.cuda.manual_seed(seed)


def same(actual, expected):
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        return False
    a, e = actual.cpu(), expected.cpu()
    if a.is_complex():
        a, e = torch.view_as_real(a), torch.view_as_real(e)
    if not a.dtype.is_floating_point:
        return bool((a == e).all())
    if RTOL == 0 and ATOL == 0:
        return bool(((a == e) | (a.isnan() & e.isnan())).all())
    return bool(torch.isclose(a, e, rtol=RTOL, atol=ATOL, equal_nan=True).all())


def main():
    static = [x.clone() for x in make_inputs(SEED)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        seed_rng(SEED)
        program(*static)  # eager warm-up
        capture = target.BreakableCUDAGraphCapture()
        seed_rng(SEED)
        CALLS.clear()
        with capture:
            outputs = program(*static)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    captured = list(CALLS)
    assert [s for s, _ in captured] == BREAK_STEPS, f"capture called breaks {captured}"
    for replay in range(REPLAYS):
        seed = SEED + 1 + replay
        fresh = make_inputs(seed)
        seed_rng(seed)
        expected = program(*[x.clone() for x in fresh])
        CALLS.clear()
        for buffer, value in zip(static, fresh):
            buffer.copy_(value)
        seed_rng(seed)
        capture.replay()
        torch.cuda.synchronize()
        assert CALLS == captured, f"replay {replay}: break calls {CALLS}, captured {captured}"
        for index, (actual, want) in enumerate(zip(outputs, expected)):
            assert same(actual, want), f"replay {replay}: output {index} differs from eager"
    print("reproducer passed: replay matched eager every time")
"""


def _call(name: str, args: Sequence[str], params: Sequence[tuple[str, object]]) -> str:
    return f"{name}({', '.join([*args, *(f'{k}={v!r}' for k, v in params)])})"


def _break_definitions(program: Program, table: dict[str, OpSpec]) -> list[str]:
    blocks = []
    for index, step in enumerate(program.steps):
        spec = table[step.op]
        if spec.kind == "break":
            blocks.append(
                f"# step {index}: break op {spec.name}\n"
                f"eager_break_during_capture = logged_break({index})\n"
                f"{spec.source.strip()}\n\n\nstep_{index} = {spec.entry}\n"
            )
        elif step.brk:
            names = [f"a{i}" for i in range(spec.arity)]
            keywords = ["*", *(k for k, _ in step.params)] if step.params else []
            signature = ", ".join([*names, *keywords])
            body = spec.expr.format(*names, **{k: k for k, _ in step.params})
            result = "return " if produces_value(spec) else ""
            blocks.append(
                f"# step {index}: {spec.name}, run as an eager break\n"
                f"@logged_break({index})\ndef step_{index}({signature}):\n    {result}{body}\n"
            )
    return blocks


def _program_function(program: Program, table: dict[str, OpSpec]) -> str:
    lines = [f"def program({', '.join(f'v{i}' for i in range(len(program.inputs)))}):"]
    next_value = len(program.inputs)
    for index, step in enumerate(program.steps):
        spec = table[step.op]
        args = [f"v{a}" for a in step.args]
        if step.brk:
            call = _call(f"step_{index}", args, step.params)
        else:
            call = spec.expr.format(*args, **{k: repr(v) for k, v in step.params})
        if produces_value(spec):
            lines.append(f"    v{next_value} = {call}")
            next_value += 1
        else:
            lines.append(f"    {call}")
        if step.drop:
            lines.append(f"    del {', '.join(f'v{v}' for v in step.drop)}")
    lines.append(f"    return [{', '.join(f'v{v}' for v in program.outputs)}]")
    return "\n".join(lines) + "\n"


def _inputs_function(program: Program) -> str:
    values = "".join(f"        {input_expr(meta)}.to(DEVICE),\n" for meta in program.inputs)
    return (
        "def make_inputs(seed):\n    g = torch.Generator().manual_seed(seed)\n"
        f"    return [\n{values}    ]\n"
    )


def render_reproducer(
    finding: Finding,
    target: Target,
    device_kind: str,
    command: str,
    replays: int = 3,
    ops: Sequence[OpSpec] | None = None,
) -> str:
    """The reproducer script for ``finding`` as Python source text."""
    table = op_table(ops)
    program = finding.program
    assert program is not None, "only a finding with a program has a reproducer"
    tol = program_tolerance(program, table)
    simulated = device_kind == "sim"
    import_code = target.import_code or f"import {target.name} as target"
    # One line: exception texts can span many and must not end the docstring.
    summary = finding.summary().splitlines()[0].replace('"""', "'")
    header = (
        f'"""Reproducer for a {finding.violation} finding ({finding.kind}) in target {target.name} ({device_kind}).\n\n'
        f"{summary}\nFuzzer command: {command}\nExits non-zero while the bug is present.\n"
        '"""\n\nimport functools\n\nimport torch\n\n'
    )
    header += import_code + "\n"
    if simulated:
        header += "from verification.sim import simulated_cuda\n"
    constants = (
        f'\nDEVICE = "{"cpu" if simulated else "cuda"}"\nSEED = {finding.seed}\n'
        f"REPLAYS = {replays}\nRTOL = {tol.rtol!r}\nATOL = {tol.atol!r}\n"
        f"BREAK_STEPS = {[i for i, s in enumerate(program.steps) if s.brk]}\n"
    )
    entry = '\n\nif __name__ == "__main__":\n' + (
        "    with simulated_cuda():\n        main()\n" if simulated else "    main()\n"
    )
    parts = [
        header + constants + _PRELUDE,
        *_break_definitions(program, table),
        _inputs_function(program),
        _program_function(program, table),
    ]
    return "\n\n".join(part.strip("\n") + "\n" for part in parts) + _CHECK + entry


def write_reproducer(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.py"
    path.write_text(text)
    return path
