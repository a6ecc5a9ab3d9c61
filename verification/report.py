"""Turns a finding into a standalone Python reproducer script.

The script imports only torch and the target (plus the simulator when the finding came
from it), defines each break from the op's ``source`` text, spells every step with the
op's ``expr``, captures, replays and asserts against an eager run of the same code. It
exits non-zero while the bug is present and prints a pass line once it is fixed.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path

from verification import bounds
from verification.devices import DeviceKind
from verification.findings import Finding
from verification.ops.ambient import AMBIENT, AMBIENT_SOURCE, TAGGED_SOURCE
from verification.ops.bindings import BINDING_SOURCE
from verification.ops.host import HOST_FORMS, HOST_SOURCE
from verification.ops.spec import OpSpec
from verification.oracle import SharedPool, program_tolerance, shared_pool_of
from verification.programs import Program, input_expr, op_table, produces_value
from verification.targets import Target

_PRELUDE = '''
CALLS = []
_depth = [0]


def seen_now():
    """What a break can read of the state it runs under (redefined below where it matters)."""
    return ()


def logged_break(step):
    """Logs one call per break step (nested calls excluded): its buffers, its tensors' Python
    attributes and the state it runs under; then applies the target's decorator, to the
    function defined as ``way`` says (a method, a partial ...: ``bound_as``)."""

    def decorate(fn, way=""):
        @functools.wraps(fn)
        def logged(*args, **kwargs):
            if _depth[0] == 0:
                leaves = torch.utils._pytree.tree_flatten((args, kwargs))[0]
                tensors = [a for a in leaves if isinstance(a, torch.Tensor)]
                here = step if isinstance(step, int) else step_of(step)
                attributes = tuple(tuple(sorted(t.__dict__)) for t in tensors)
                CALLS.append((here, tuple(t.data_ptr() for t in tensors), attributes, seen_now()))
            _depth[0] += 1
            try:
                return fn(*args, **kwargs)
            finally:
                _depth[0] -= 1

        if way:
            return bound_as(way, target.eager_break_during_capture, logged)
        return target.eager_break_during_capture(logged)

    return decorate
'''

# A break function shared by several steps logs the step named by at(); called by the
# target at replay, the first of its steps after the step logged last.
_SHARED_STEPS = """
NAMED = [None]


def at(step, fn):
    # fn, one break function shared by several steps, called for step.
    def call(*args, **kwargs):
        NAMED[0] = step
        return fn(*args, **kwargs)

    return call


def step_of(steps):
    named, NAMED[0] = NAMED[0], None
    if named is None:
        last = CALLS[-1][0] if CALLS else -1
        named = next((s for s in steps if s > last), steps[0])
    return named
"""

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
    exact = a.element_size() == 1  # float8: exact, in float32
    a, e = (a.float(), e.float()) if exact else (a, e)
    if exact or (RTOL == 0 and ATOL == 0):
        return bool(((a == e) | (a.isnan() & e.isnan())).all())
    return bool(torch.isclose(a, e, rtol=RTOL, atol=ATOL, equal_nan=True).all())


def capture_once(pool):
    define_breaks()  # each capture's breaks keep state of their own
    static = [x.clone() for x in make_inputs(SEED)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        seed_rng(SEED)
        program(*static)  # eager warm-up
        capture = target.BreakableCUDAGraphCapture(**pool)
        seed_rng(SEED)
        CALLS.clear()
        with capture:
            outputs = program(*static)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    captured = list(CALLS)
    assert [call[0] for call in captured] == BREAK_STEPS, f"capture called breaks {captured}"
    return static, capture, outputs, captured, None


def replay_in_order(runs, order, first):
    for replay, which in enumerate(order, start=first):
        static, capture, outputs, captured, host = runs[which]
        where = f"replay {replay}" + (f" (capture {which})" if len(runs) > 1 else "")
        seed = SEED + 1 + replay
        fresh = make_inputs(seed)
        define_breaks()  # the reference shares no state with the captured run's breaks
        seed_rng(seed)
        expected = program(*[x.clone() for x in fresh])
        CALLS.clear()
        for buffer, value in zip(static, fresh):
            buffer.copy_(value)
        seed_rng(seed)
        capture.replay()
        torch.cuda.synchronize()
        for call, want in zip(CALLS, captured):
            assert call == want, f"{where}: break call {call} (step, buffers, attributes, state), captured {want}"
        assert len(CALLS) == len(captured), f"{where}: break calls {CALLS}, captured {captured}"
        for index, (actual, want) in enumerate(zip(outputs, expected)):
            assert same(actual, want), f"{where}: output {index} differs from eager"
    return True


def main():
    if not replay_in_order([capture_once({})], [0] * REPLAYS, 0):
        return
    if CAPTURES > 1:
        # The capture set: CAPTURES captures of the program in one pool, each on inputs of
        # its own, as an engine captures its batch sizes, replayed in ORDER.
        pool = {"pool": torch.cuda.graph_pool_handle()}
        runs = [capture_once(pool) for _ in range(CAPTURES)]
        if not replay_in_order(runs, ORDER, REPLAYS):
            return
    print("reproducer passed: replay matched eager every time")
"""


def _call(name: str, args: Sequence[str], params: Sequence[tuple[str, object]]) -> str:
    return f"{name}({', '.join([*args, *(f'{k}={v!r}' for k, v in params)])})"


def _break_blocks(program: Program, table: dict[str, OpSpec]) -> list[str]:
    """Source blocks that define ``step_i`` for each break step ``i``, through the decorator
    ``logged_break(i)`` returns."""
    blocks = []
    for (op, slot), steps in _shared_slots(program).items():
        spec = table[op]
        blocks.append(
            f"# break op {spec.name}: one decorated function called at steps {steps}\n"
            f"eager_break_during_capture = {_decorating(steps, program)}\n"
            f"{spec.source.strip()}\n\n\n{_shared_name(op, slot)} = {spec.entry}\n"
        )
    for index, step in enumerate(program.steps):
        spec = table[step.op]
        if step.fn >= 0:
            continue
        if spec.kind == "break":
            blocks.append(
                f"# step {index}: break op {spec.name}\n"
                f"eager_break_during_capture = {_decorating(index, program)}\n"
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
                f"@{_decorating(index, program)}\n"
                f"def step_{index}({signature}):\n    {result}{body}\n"
            )
    return blocks


def _decorating(steps: int | list[int], program: Program) -> str:
    """The decorator of the step(s)' function: ``logged_break``'s, applied to the function
    defined as the (first) step's binding says."""
    first = steps if isinstance(steps, int) else steps[0]
    bind = program.steps[first].bind
    plain = f"logged_break({steps})"
    return f"lambda fn: {plain}(fn, {bind!r})" if bind else plain


def _shared_slots(program: Program) -> dict[tuple[str, int], list[int]]:
    """The steps of each shared break function (op, slot), in program order."""
    slots: dict[tuple[str, int], list[int]] = {}
    for index, step in enumerate(program.steps):
        if step.fn >= 0:
            slots.setdefault((step.op, step.fn), []).append(index)
    return slots


def _shared_name(op: str, slot: int) -> str:
    return f"{op}_{slot}"


def _break_definitions(program: Program, table: dict[str, OpSpec]) -> list[str]:
    blocks = _break_blocks(program, table)
    if not blocks:
        return ["def define_breaks():\n    pass\n\n\ndefine_breaks()\n"]
    names = ", ".join(
        [f"step_{i}" for i, s in enumerate(program.steps) if s.brk and s.fn < 0]
        + [_shared_name(op, slot) for op, slot in _shared_slots(program)]
    )
    # A function, as the fuzzer builds each run's break callables afresh: the eager
    # reference then runs on breaks of its own, never on the module state of the captured
    # run's (an op that freezes a host value at capture is caught that way).
    body = textwrap.indent("\n\n".join(b.strip("\n") for b in blocks), "    ")
    return [
        f'def define_breaks():\n    """Defines each break step anew."""\n    global {names}\n'
        f"{body}\n\n\ndefine_breaks()\n"
    ]


def _program_function(program: Program, table: dict[str, OpSpec], hooked: bool = False) -> str:
    """``program(v0, ...)``; ``hooked``: it takes ``hook(step index, live values)`` too, called
    before each step and once after the last, as the harness's ``run_steps`` calls it."""
    inputs = [f"v{i}" for i in range(len(program.inputs))]
    extra = [*(["host"] if program.host else []), *(["hook=None"] if hooked else [])]
    lines = [f"def program({', '.join([*inputs, *extra])}):"]
    if hooked:
        lines.append("    hook = hook or (lambda index, live: None)")
    live = list(range(len(program.inputs)))
    next_value = len(program.inputs)

    def call_hook(index: int) -> None:
        if hooked:
            lines.append(f"    hook({index}, {{{', '.join(f'{v}: v{v}' for v in live)}}})")

    for index, step in enumerate(program.steps):
        call_hook(index)
        spec = table[step.op]
        args = [f"tagged(v{a})" if step.tag else f"v{a}" for a in step.args]
        if step.host:
            args.append(HOST_FORMS[step.host])
        if step.fn >= 0:
            call = _call(f"at({index}, {_shared_name(step.op, step.fn)})", args, step.params)
        elif step.brk:
            call = _call(f"step_{index}", args, step.params)
        else:
            call = spec.expr.format(*args, **{k: repr(v) for k, v in step.params})
        indent = "    "
        if step.ambient:
            lines.append(f"    with {AMBIENT[step.ambient]}:  # the region's own block")
            indent = "        "
        if produces_value(spec):
            lines.append(f"{indent}v{next_value} = {call}")
            live.append(next_value)
            next_value += 1
        else:
            lines.append(f"{indent}{call}")
        if step.drop:
            lines.append(f"    del {', '.join(f'v{v}' for v in step.drop)}")
            live = [v for v in live if v not in step.drop]
    call_hook(len(program.steps))
    lines.append(f"    return [{', '.join(f'v{v}' for v in program.outputs)}]")
    return "\n".join(lines) + "\n"


def _inputs_function(program: Program, name: str = "make_inputs", on_device: bool = True) -> str:
    """``name(seed)``: the inputs' values, on ``DEVICE`` (``on_device``) or on the CPU."""
    to = ".to(DEVICE)" if on_device else ""
    values = "".join(f"        {input_expr(meta)}{to},\n" for meta in program.inputs)
    return (
        f"def {name}(seed):\n    g = torch.Generator().manual_seed(seed)\n"
        f"    return [\n{values}    ]\n"
    )


def program_source(program: Program, name: str, ops: Sequence[OpSpec] | None = None) -> str:
    """Source text of two functions that spell ``program`` in torch calls, as a reproducer
    does: ``{name}_inputs(seed)``, its inputs' values on the CPU, and
    ``define_{name}(logged_break)``, which makes each break step afresh through the decorator
    ``logged_break(step index)`` returns and returns ``program(v0, ..., hook=None)``."""
    table = op_table(ops)
    blocks = [b.strip("\n") for b in [*_call_way_sources(program), *_break_blocks(program, table)]]
    body = "\n\n".join([*blocks, _program_function(program, table, hooked=True).strip("\n")])
    return (
        "".join(f"{source.strip()}\n\n\n" for source in _binding_source(program))
        + _inputs_function(program, f"{name}_inputs", on_device=False)
        + f"\n\ndef define_{name}(logged_break):\n"
        f'    """The program, each break step made anew through logged_break(step)."""\n'
        f"{textwrap.indent(body, '    ')}\n\n    return program\n"
    )


def _watchdog(shared: SharedPool | None, replays: int) -> str:
    """The script's own bound: the harness's bound on each capture and replay it makes, so
    that a call that never returns ends it with every thread's stack, not a frozen terminal."""
    if not math.isfinite(bounds.current()):
        return ""
    calls = 1 + replays + (0 if shared is None else shared.captures + len(shared.order))
    return (
        "    # A call that never returns: every thread's stack, and exit 1.\n"
        f"    faulthandler.dump_traceback_later({bounds.current() * calls:g}, exit=True)\n"
    )


def render_reproducer(
    finding: Finding,
    target: Target,
    device_kind: DeviceKind,
    command: str,
    replays: int = 3,
    ops: Sequence[OpSpec] | None = None,
) -> str:
    """The reproducer script for ``finding`` as Python source text."""
    table = op_table(ops)
    program = finding.program
    assert program is not None, "only a finding with a program has a reproducer"
    shared = shared_pool_of(finding)
    tol = program_tolerance(program, table)
    simulated = device_kind == "sim"
    import_code = target.import_code or f"import {target.name} as target"
    # One line: exception texts can span many and must not end the docstring.
    summary = finding.summary().splitlines()[0].replace('"""', "'")
    # A finding that blames a user's break op (fuzz-op) names the op, run by the target.
    culprit = (
        f"in a user's break op run by target {target.name}"
        if finding.kind == "op-bug"
        else f"in target {target.name}"
    )
    header = (
        f'"""Reproducer for a {finding.violation} finding ({finding.kind}) {culprit} ({device_kind}).\n\n'
        f"{summary}\nFuzzer command: {command}\nExits non-zero while the bug is present.\n"
        '"""\n\nimport faulthandler\nimport functools\n\nimport torch\n\n'
    )
    header += import_code + "\n"
    if simulated:
        header += "from verification.sim import simulated_cuda\n"
    constants = (
        f'\nDEVICE = "{"cpu" if simulated else "cuda"}"\nSEED = {finding.seed}\n'
        f"REPLAYS = {replays}\nRTOL = {tol.rtol!r}\nATOL = {tol.atol!r}\n"
        f"BREAK_STEPS = {[i for i, s in enumerate(program.steps) if s.brk]}\n"
        f"CAPTURES = {1 if shared is None else shared.captures}\n"
        f"ORDER = {[] if shared is None else list(shared.order)}\n"
    )
    entry = (
        '\n\nif __name__ == "__main__":\n'
        + _watchdog(shared, replays)
        + ("    with simulated_cuda():\n        main()\n" if simulated else "    main()\n")
    )
    if program.host:
        header = header.replace(
            "import faulthandler\n", "import dataclasses\nimport faulthandler\n", 1
        )
        constants += f"HOST_SEQUENCES = {program.host}\n"
    may_refuse = sorted({table[s.op].entry for s in program.steps if table[s.op].alias_varies})
    if may_refuse:
        constants += f"MAY_REFUSE = {may_refuse}\n"
    parts = [
        header + constants + _PRELUDE,
        *([_SHARED_STEPS] if _shared_slots(program) else []),
        *([HOST_SOURCE] if program.host else []),
        *_call_way_sources(program),
        *_binding_source(program),
        *(["seen_now = ambient_seen\n"] if any(s.ambient for s in program.steps) else []),
        *_break_definitions(program, table),
        _inputs_function(program),
        _program_function(program, table),
    ]
    check = _with_host(_CHECK) if program.host else _CHECK
    if may_refuse:
        check = _with_refusal(check)
    return "\n\n".join(part.strip("\n") + "\n" for part in parts) + check + entry


def _call_way_sources(program: Program) -> list[str]:
    """The definitions a program's calls use: ``tagged``, ``ambient_seen`` and the blocks."""
    return [
        *([TAGGED_SOURCE] if any(s.tag for s in program.steps) else []),
        *([AMBIENT_SOURCE] if any(s.ambient for s in program.steps) else []),
    ]


def _binding_source(program: Program) -> list[str]:
    """``bound_as``, at the script's top level where a break is bound otherwise than as a
    plain function (``logged_break`` and the property scripts' stand-in call it)."""
    return [BINDING_SOURCE] if any(s.bind for s in program.steps) else []


def _with_refusal(check: str) -> str:
    """The check loop of a program with a break that may return its argument on one call and
    a new tensor on another: a replay error naming that break is the contract's refusal."""
    old = "        capture.replay()\n"
    new = (
        "        try:\n"
        "            capture.replay()\n"
        "        except RuntimeError as error:\n"
        "            if not any(name in str(error) for name in MAY_REFUSE):\n"
        "                raise\n"
        '            print(f"reproducer passed: the target refused the break: {error}")\n'
        "            return\n"
    )
    assert old in check
    return check.replace(old, new)


def _with_host(check: str) -> str:
    """The check loop of a program with host values: made once for the capture and rewritten
    in place before each replay, as a runner does; the eager reference gets its own."""
    swaps = (
        ("program(*static)  # eager warm-up", "program(*static, host)  # eager warm-up"),
        ("with capture:\n            outputs = program(*static)",
         "with capture:\n            outputs = program(*static, host)"),
        ("    static = [x.clone() for x in make_inputs(SEED)]\n",
         "    static = [x.clone() for x in make_inputs(SEED)]\n"
         "    host = make_host(HOST_SEQUENCES, SEED)  # the runner's, rewritten before replays\n"),
        ("expected = program(*[x.clone() for x in fresh])",
         "expected = program(*[x.clone() for x in fresh], make_host(HOST_SEQUENCES, seed))"),
        ("        seed_rng(seed)\n        capture.replay()",
         "        update_host(host, seed)\n        seed_rng(seed)\n        capture.replay()"),
        ("    return static, capture, outputs, captured, None\n",
         "    return static, capture, outputs, captured, host\n"),
    )  # fmt: skip
    for old, new in swaps:
        assert old in check, old
        check = check.replace(old, new)
    return check


def write_reproducer(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.py"
    path.write_text(text)
    return path
