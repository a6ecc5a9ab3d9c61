"""Tests for ``python -m verification mutate``: mutants reach the stages only through a
scratch copy, kills and survivors are reported with diffs, and bad input is a usage error.

A tiny torch-free target keeps these fast: its "unit tests" are one ``python -c`` line.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("cosmic_ray")

from verification.commands.cli import main
from verification.errors import UsageError
from verification.mutation import MutationConfig, run_mutation
from verification.mutation.equivalence import equivalence_hint
from verification.mutation.operators import selected
from verification.mutation.stages import build_stages

TOY = """\
def clamp(x, low, high):
    if x < low:
        return low
    if x > high:
        return high
    return x
"""
TOY_TESTS = (
    f'{sys.executable} -c "import toy_target as t; '
    'assert (t.clamp(-1, 0, 3), t.clamp(2, 0, 3), t.clamp(5, 0, 3)) == (0, 2, 3)"'
)


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    package = tmp_path / "src" / "toy_target"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(package.parent))
    return package / "__init__.py"


def _config(unit_tests: str, **kwargs: object) -> MutationConfig:
    return MutationConfig(target="toy_target", unit_tests=unit_tests, harness=False, **kwargs)


def test_toy_mutants_are_killed_and_the_equivalent_ones_survive_with_diffs(toy: Path) -> None:
    result = run_mutation(_config(TOY_TESTS, jobs=2))
    assert result.available == len(result.mutants) == 6  # 2 AddNot, 4 comparison flips
    assert result.killed and all(m.killed_by == "unit tests" for m in result.killed)
    # `x < low` made `x <= low` returns low either way: an equivalent mutant must survive.
    survivors = {(m.line, m.operator) for m in result.survivors}
    assert (2, "ReplaceComparisonOperator_Lt_LtE") in survivors
    for mutant in result.survivors:
        assert mutant.file == "toy_target/__init__.py"
        assert any(line.startswith("-") for line in mutant.diff.splitlines())
        assert any(line.startswith("+") for line in mutant.diff.splitlines())
    assert toy.read_text() == TOY  # the real target is never mutated


def test_budget_samples_that_many_mutants_reproducibly(toy: Path) -> None:
    first = run_mutation(_config(TOY_TESTS, budget=3, seed=5))
    again = run_mutation(_config(TOY_TESTS, budget=3, seed=5))
    assert len(first.mutants) == 3
    assert [m.label for m in first.mutants] == [m.label for m in again.mutants]


def test_line_filter_keeps_only_mutants_on_that_line(toy: Path) -> None:
    result = run_mutation(_config(TOY_TESTS, lines=(("toy_target/__init__.py", 4),)))
    assert result.mutants and {m.line for m in result.mutants} == {4}
    with pytest.raises(UsageError, match="no mutant"):
        run_mutation(_config(TOY_TESTS, lines=(("toy_target/__init__.py", 1),)))


def test_stage_that_never_loads_the_scratch_copy_is_refused(toy: Path) -> None:
    # `true` passes on the canary copy that cannot import: it would call every mutant a
    # survivor, so the run refuses it before judging any mutant.
    with pytest.raises(UsageError, match="does not load the scratch copy"):
        run_mutation(_config("true"))


def test_stage_failing_on_the_unmutated_target_is_refused(toy: Path) -> None:
    with pytest.raises(UsageError, match="fails on the unmutated target"):
        run_mutation(_config("false"))


def test_nothing_to_run_is_refused(toy: Path) -> None:
    with pytest.raises(UsageError, match="nothing to run"):
        run_mutation(MutationConfig(target="toy_target", harness=False))


@pytest.mark.parametrize("target", ["no_such_module_xyz", "sys"])
def test_mutate_on_a_target_without_source_says_one_line_and_exits_2(
    target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["mutate", "--target", target, "--device", "sim"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


BROKEN_TARGETS = {
    "raising_pkg": ("raising_pkg/__init__.py", 'raise RuntimeError("broken\\nat import")\n'),
    "raising_pkg.sub": ("raising_pkg/sub.py", "x = 1\n"),  # its parent package raises
    "missing_dep": (
        "missing_dep.py",
        "import no_such_dependency_xyz\n\ndef f(x):\n    return x > 0\n",
    ),
    "exiting_mod": ("exiting_mod.py", "import sys\n\nsys.exit(3)\n"),
}


@pytest.mark.parametrize("target", sorted(BROKEN_TARGETS))
def test_mutate_on_a_target_that_does_not_import_says_one_line_and_exits_2(
    target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found but not importable: without this every mutant would "die" of the import error.
    for path, text in BROKEN_TARGETS.values():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["mutate", "--target", target, "--device", "sim", "--unit-tests", "true"]
    assert main([*argv, "--no-harness"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"error: target module {target!r} cannot be imported")
    assert err.count("\n") == 1


def test_harness_stages_are_fuzz_plus_check_all_when_properties_exist() -> None:
    names = [stage.name for stage in build_stages(None)]
    has_properties = importlib.util.find_spec("verification.properties") is not None
    assert names == ["fuzz", *(["check all"] if has_properties else [])]
    assert build_stages("pytest")[0].name == "unit tests"


def test_operator_selection_keeps_negations_and_drops_operator_noise() -> None:
    assert selected("core/AddNot") and selected("core/ReplaceComparisonOperator_Eq_NotEq")
    assert not selected("core/ReplaceBinaryOperator_Add_LShift")
    assert not selected("core/ReplaceComparisonOperator_Eq_Lt")


def test_equivalence_hints_flag_reprs_and_overloads_but_not_plain_logic() -> None:
    class Spec:
        definition_name = "__repr__"

    assert equivalence_hint("AddNot", "    if x:", Spec()) == "changes only a repr"
    assert equivalence_hint("RemoveDecorator", "@overload", None) is not None
    stub = "def f(fn: None = None, *, enable: bool = True) -> Callable[[F], F]: ..."
    assert "stub" in (equivalence_hint("ReplaceTrueWithFalse", stub, None) or "")
    assert equivalence_hint("AddNot", "    if x < low:", None) is None
