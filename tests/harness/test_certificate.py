"""The certificate records what a reviewer needs: target and commit, contract, environment,
settings, per-check verdicts, coverage, and the sensitivity line that shows the harness's
teeth in the environment where it was made."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tests.child_env import child_env
from verification.certify import checks, sensitivity
from verification.certify.certificate import certificate, markdown
from verification.certify.checks import fuzz_check
from verification.certify.run import CertifyRun, Check, CheckResult
from verification.fuzz import CampaignConfig
from verification.properties import PROPERTIES
from verification.targets import load_target

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def two_planted(tmp_path, monkeypatch):
    """Planted modules whose first 'bug' is real and whose second is the clean target: one
    for the fuzzer, one for a property check."""
    (tmp_path / "two_planted.py").write_text(
        "from verification.planted.targets import build as _build\n"
        "BUGS = {'eager_run_twice': 'real', 'no_bug': 'clean, must be missed'}\n"
        "def build(bug):\n    return _build(None if bug == 'no_bug' else bug)\n"
    )
    (tmp_path / "two_planted_properties.py").write_text(
        "from verification.planted.property_targets import build as _build\n"
        "BUGS = {'global_active_capture': ('real', 'threads', None),\n"
        "        'no_bug': ('clean, must be missed', 'threads', None)}\n"
        "def build(bug):\n    return _build(None if bug == 'no_bug' else bug)\n"
    )
    (tmp_path / "no_runner_bugs.py").write_text("BUGS = {}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sensitivity, "RUNNER_MODULE", "no_runner_bugs")
    monkeypatch.setattr(sensitivity, "FUZZ_MODULES", ("two_planted",))
    monkeypatch.setattr(sensitivity, "PROPERTY_MODULE", "two_planted_properties")
    monkeypatch.setattr(sensitivity, "DUTY_MODULE", "no_runner_bugs")
    monkeypatch.setattr(sensitivity, "FUZZ_EXAMPLES", 10)
    yield
    sys.modules.pop("two_planted", None)
    sys.modules.pop("two_planted_properties", None)
    sys.modules.pop("no_runner_bugs", None)


# The planted modules exist only in this process; on a GPU sensitivity runs each property
# target in a child process, which cannot import them.
@pytest.mark.sim
def test_sensitivity_counts_found_and_missed_planted_bugs(bcg_kind, two_planted):
    measured = sensitivity.measure(bcg_kind)
    assert measured is not None
    assert (measured["found"], measured["total"]) == (2, 4)
    found = {row["name"]: row["found"] for row in measured["targets"]}
    assert found == {
        "two_planted:eager_run_twice": True,
        "two_planted:no_bug": False,
        "two_planted_properties:global_active_capture": True,
        "two_planted_properties:no_bug": False,
    }
    assert measured["by_check"] == {
        "fuzz": {"found": 1, "total": 2},
        "threads": {"found": 1, "total": 2},
    }


def test_every_planted_bug_of_tests_is_in_sensitivity():
    planted = sensitivity.planted_targets()
    assert planted is not None
    checks = {p.check for p in planted}
    assert "fuzz" in checks and {"pool", "nested", "threads", "faults", "runner"} <= checks


def test_sensitivity_keeps_the_planted_targets_empty_graph_warnings_to_itself(
    bcg_kind, two_planted
):
    # The planted copies capture empty segments by the hundred; certify's output is for people.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sensitivity.measure(bcg_kind)
    assert not [w for w in caught if "CUDA Graph is empty" in str(w.message)]


def test_the_planted_targets_ship_with_the_package():
    # certify from a non-editable install measures sensitivity: nothing it runs is in tests/.
    modules = (
        *sensitivity.FUZZ_MODULES,
        sensitivity.PROPERTY_MODULE,
        sensitivity.DUTY_MODULE,
        sensitivity.RUNNER_MODULE,
    )
    assert all(name.startswith("verification.planted.") for name in modules)


# The planted modules exist only in this process; on a GPU sensitivity runs each property
# target in a child process, which cannot import them.
@pytest.mark.sim
def test_certificate_has_every_field_and_markdown_starts_simulated(bcg_kind, two_planted):
    config = CampaignConfig(load_target("breakable_cudagraph"), bcg_kind, examples=3)
    run = CertifyRun(config)
    cert = certificate(
        run,
        [fuzz_check(run), sensitivity.sensitivity_check(run)],
        "quick",
        overrides={"examples": 3},
        command="python -m verification certify --examples 3",
        seconds=12.34,
    )
    assert cert["target"]["name"] == "breakable_cudagraph" and cert["target"]["version"]
    assert cert["contract"]["name"] == "returns" and cert["contract"]["source"] == "declared"
    assert set(cert["environment"]) >= {"torch", "cuda", "driver", "gpu", "hypothesis"}
    assert set(cert["settings"]) >= {"profile", "seed", "examples", "max_ops", "max_breaks"}
    assert cert["checks"][0]["name"] == "fuzz" and cert["checks"][0]["verdict"] == "pass"
    assert set(cert["coverage"]) == {
        "ops",
        "break_ops",
        "break_positions",
        "input_dtypes",
        "captures_per_pool",
    }
    assert sum(cert["coverage"]["ops"].values()) >= 3
    text = markdown(cert)
    assert text.startswith("SIMULATED") == (bcg_kind == "sim")
    assert "planted-bug targets found: 2 of 4" in text and "two_planted:no_bug" in text
    assert "- profile: quick with overrides --examples 3" in text
    assert "- command: `python -m verification certify --examples 3`" in text
    assert "- total time: 12.3 s" in text
    assert "| sensitivity | 4 planted bugs" in text and "2 of 4 found: MISSED 2" in text
    assert ("- GPU:" in text) == (bcg_kind == "cuda") and "GPU None" not in text


def _keys(data: object) -> list[str]:
    if isinstance(data, dict):
        return [k for k, v in data.items() for k in [k, *_keys(v)]]
    if isinstance(data, list):
        return [k for item in data for k in _keys(item)]
    return []


def test_json_keys_are_identifiers_except_where_they_name_data(bcg_kind, two_planted):
    config = CampaignConfig(load_target("breakable_cudagraph"), bcg_kind, examples=3)
    run = CertifyRun(config)
    cert = certificate(run, [fuzz_check(run), sensitivity.sensitivity_check(run)], "quick")
    # Coverage counts are keyed by op names and the like: data, not field names.
    data = {k: v for k, v in cert.items() if k != "coverage"}
    assert all(key.isidentifier() for key in _keys(data)), _keys(data)


def test_certificate_md_says_what_ran_on_what_by_which_command(tmp_path):
    """One certify run of a target in a git repository whose file was then edited."""
    repo = tmp_path / "repo"
    repo.mkdir()
    module = repo / "edited_target.py"
    module.write_text(
        "from breakable_cudagraph import BreakableCUDAGraphCapture, BreakableGraphRunner\n"
        "from breakable_cudagraph import eager_break_during_capture\n"
        "BREAK_CONTRACT = 'returns'\n"
    )
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "one"]):
        subprocess.run([*git, *args], cwd=repo, check=True, capture_output=True)
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()
    module.write_text(module.read_text() + "# edited after the commit\n")
    out = tmp_path / "cert"
    argv = ["certify", "--target", "edited_target", "--device", "sim", "--profile", "quick",
            "--examples", "3", "--no-sensitivity", "--out", str(out)]  # fmt: skip
    env = child_env(repo)
    done = subprocess.run(
        [sys.executable, "-m", "verification", *argv],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    text = (out / "certificate.md").read_text()
    assert f"- target: `edited_target`, commit {head[:12]}-dirty" in text, text
    assert "- contract: **returns**, declared by the target" in text
    assert "- profile: quick with overrides --examples 3 " in text
    assert f"- command: `python -m verification {' '.join(argv)}`" in text
    assert re.search(r"^- total time: [0-9.]+ s$", text, re.MULTILINE)
    assert "- GPU:" not in text and "None" not in text.split("## Checks")[0]
    for prop in PROPERTIES:
        assert re.search(rf"^\| {prop} \(property\) \| \d+ examples?", text, re.MULTILINE), prop
    assert "| sensitivity |" not in text
    assert "not measured: --no-sensitivity (--sensitivity=off) was given" in text
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["profile"] == {
        "name": "quick",
        "overrides": {"examples": 3},
        "label": "quick with overrides --examples 3",
    }
    assert cert["target"]["dirty"] and not cert["target"]["untracked"]
    assert "overly large repr" not in done.stderr
    # Off a terminal (a CI log) a line as each check starts and ends, the verdict last, and
    # none of the warnings the harness provokes itself.
    lines = done.stdout.splitlines()
    assert any(line.endswith("fuzz: started, budget 4 s") for line in lines), done.stdout
    for name in ("fuzz", *PROPERTIES):
        assert any(re.search(rf"\] {name}: pass, \d+ examples in", line) for line in lines), name
    assert lines[-1].startswith("certify: PASS"), done.stdout
    assert "warning" not in done.stderr.lower(), done.stderr


def test_checks_is_the_one_list_of_certify_a_row_per_property(monkeypatch):
    # The property checks are one entry, run side by side, and a row each in the certificate.
    assert [c.name for c in checks.CHECKS] == [
        "fuzz",
        "ops",
        "properties",
        "sensitivity",
        "mutation",
    ]
    # Adding a check is one entry: certify runs it and the certificate lists it.
    extra = Check(
        "extra",
        lambda run: CheckResult("extra", 1, 0.0, coverage={"extra": {"runs": 1}}),
        budget=lambda run: 1,
    )
    monkeypatch.setattr(checks, "CHECKS", [extra])
    target = load_target("breakable_cudagraph")
    run = CertifyRun(CampaignConfig(target=target, kind="sim"))
    announced = []
    results = checks.run_checks(run, lambda *check: announced.append(check))
    cert = certificate(run, results, "quick")
    assert announced == [("extra", 1, "examples")]
    assert [c["name"] for c in cert["checks"]] == ["extra"]
    assert cert["coverage"] == {"extra": {"runs": 1}} and cert["sensitivity"] is None
