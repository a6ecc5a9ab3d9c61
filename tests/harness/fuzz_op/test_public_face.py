"""The import a spec file uses: ``from verification import BreakOpSpec, TensorArg``, the exact
set of public names pinned, loaded lazily (no torch for ``--help``), and the module path spec files
used before (``verification.userops.spec``) still working."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import verification
from verification.userops import spec as userops_spec
from verification.userops.spec import load_spec

ROOT = Path(__file__).resolve().parents[3]


def test_the_public_names_are_exactly_what_a_spec_needs():
    assert sorted(verification.__all__) == ["BreakOpSpec", "TensorArg", "WriteMask", "validate"]
    for name in verification.__all__:
        assert getattr(verification, name) is getattr(userops_spec, name)


def test_importing_the_package_loads_neither_torch_nor_the_spec_module():
    code = "import sys, verification; print('torch' in sys.modules, 'verification.userops' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.stdout.split() == ["False", "False"], done.stderr


def test_a_spec_written_against_an_older_import_path_still_loads(tmp_path, monkeypatch):
    from verification import BreakOpSpec

    source = (ROOT / "examples" / "varlen_attention.py").read_text()
    source = source.replace("from verification import", "from verification.userops.spec import")
    (tmp_path / "deep_ops.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded = load_spec("deep_ops:SPEC")
    assert isinstance(loaded.spec, BreakOpSpec) and loaded.spec.op_name == "varlen_attention"


def test_the_docs_and_examples_use_the_public_import():
    said = "from verification import BreakOpSpec, TensorArg"
    assert said in (ROOT / "docs" / "fuzz-op.md").read_text()
    for example in ("varlen_attention", "varlen_prefill", "paged_kv_cache", "dynamic_int8_quant"):
        text = (ROOT / "examples" / f"{example}.py").read_text()
        assert said in text and "verification.userops" not in text, example
