"""Reproducer scripts for property findings, and the entry point they call.

:func:`render` writes a script that stands alone (it imports only torch and the target), for
a fixed scenario's finding and for a drawn program's (:mod:`.standalone`). Where a drawn
program's scenario reaches harness code a script cannot carry, it falls back to a script
that binds the target as the finding's target did, spells the shrunk program as data and
calls :func:`reproduce`, which re-checks that one program under the finding's scenario.
Either script exits 1 while the bug is present and 0 once fixed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from verification.devices import device_context, resolve_kind
from verification.findings import Finding
from verification.programs import Program
from verification.properties import standalone
from verification.properties.base import CheckConfig
from verification.targets import Target, load_target


def render(finding: Finding, target: Target, kind: str, command: str) -> str | None:
    """The reproducer script for ``finding``, or None when it has none (no program and no
    fixed scenario). The script stands alone (:mod:`.standalone`) where it can; a drawn
    program's otherwise calls :func:`reproduce`."""
    if "fixed" in dict(finding.scenario):
        try:
            return standalone.render(finding, target, kind, command)
        except standalone.NotStandalone:
            return None
    if finding.program is None:
        return None
    try:
        return standalone.render_program(finding, target, kind, command)
    except standalone.NotStandalone:
        pass
    import_code = target.import_code or f"import {target.name} as target"
    return (
        f'"""Reproducer for a {finding.check} {finding.kind} finding in target {target.name} '
        f"({kind}).\n\n{finding.summary().replace(chr(34) * 3, chr(39))}\n"
        f'Command: {command}\nExits 1 while the bug is present, 0 once it is fixed.\n"""\n\n'
        "import sys\n\nimport torch  # noqa: F401  (the program's dtypes)\n\n"
        "from verification.ops.spec import TensorMeta  # noqa: F401\n"
        "from verification.programs import Program, Step  # noqa: F401\n"
        "from verification.properties.reproduce import reproduce\n"
        f"{import_code}\n\n"
        f"PROGRAM = {finding.program!r}\n"
        f"SCENARIO = {dict(finding.scenario)!r}\n\n"
        'if __name__ == "__main__":\n'
        f"    sys.exit(reproduce({finding.check!r}, target, PROGRAM, SCENARIO, "
        f"seed={finding.seed or 0}, device={kind!r}, contract={target.contract.name!r}))\n"
    )


def write(directory: Path, number: int, finding: Finding, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"property_{number}_{finding.check}_{finding.kind}.py"
    path.write_text(text)
    return path


def reproduce(
    prop: str,
    target: Any,
    program: Program,
    scenario: dict[str, Any],
    seed: int = 0,
    device: str = "auto",
    contract: str | None = None,
    cycles: int = 100,
) -> int:
    """Checks ``prop`` again on one program: what a property reproducer calls, a process of
    its own handed names, which it resolves here, once. ``device`` is the device choice, by
    the keyword that reproducers already written pass it."""
    from verification.properties import PROPERTIES

    kind = resolve_kind(device)
    loaded = load_target(target, contract)
    with device_context(kind) as torch_device:
        config = CheckConfig(loaded, kind, torch_device, 1, seed, cycles)
        problem = PROPERTIES[prop].example(program, scenario, config)
    if problem is None:
        print(f"reproducer passed: property {prop} holds")
        return 0
    print(f"property {prop} violated: {problem}", file=sys.stderr)
    return 1
