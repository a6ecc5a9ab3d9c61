"""The certificate records what a reviewer needs: target and commit, contract, environment,
settings, per-check verdicts, coverage, and the sensitivity line that shows the harness's
teeth in the environment where it was made."""

from __future__ import annotations

import sys
import warnings

import pytest

from verification.certify import checks, sensitivity
from verification.certify.certificate import certificate, markdown
from verification.certify.checks import fuzz_check
from verification.certify.run import CertifyRun, Check, CheckResult
from verification.fuzz import CampaignConfig
from verification.targets import load_target


@pytest.fixture
def two_planted(tmp_path, monkeypatch):
    """A planted module whose first 'bug' is real and whose second is the clean target."""
    (tmp_path / "two_planted.py").write_text(
        "from verification.planted.targets import build as _build\n"
        "BUGS = {'eager_run_twice': 'real', 'no_bug': 'clean, must be missed'}\n"
        "def build(bug):\n    return _build(None if bug == 'no_bug' else bug)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sensitivity, "PLANTED_MODULES", ("two_planted",))
    monkeypatch.setattr(sensitivity, "EXAMPLES", 10)
    yield
    sys.modules.pop("two_planted", None)


def test_sensitivity_counts_found_and_missed_planted_bugs(bcg_kind, two_planted):
    measured = sensitivity.measure(bcg_kind)
    assert measured is not None
    assert (measured["found"], measured["total"]) == (1, 2)
    assert measured["targets"] == {"two_planted:eager_run_twice": True, "two_planted:no_bug": False}


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
    assert all(name.startswith("verification.planted.") for name in sensitivity.PLANTED_MODULES)
    assert len(sensitivity.planted_targets()) >= 2


def test_certificate_has_every_field_and_markdown_starts_simulated(bcg_kind, two_planted):
    config = CampaignConfig(target="breakable_cudagraph", device=bcg_kind, examples=3)
    run = CertifyRun(config, load_target("breakable_cudagraph"), bcg_kind)
    cert = certificate(run, [fuzz_check(run), sensitivity.sensitivity_check(run)], "quick")
    assert cert["target"]["name"] == "breakable_cudagraph" and cert["target"]["version"]
    assert cert["contract"]["name"] == "returns"
    assert set(cert["environment"]) >= {"torch", "cuda", "driver", "gpu", "hypothesis"}
    assert set(cert["settings"]) >= {"profile", "seed", "examples", "max_ops", "max_breaks"}
    assert [c["name"] for c in cert["checks"]] == ["fuzz"]  # sensitivity is its own section
    assert cert["checks"][0]["verdict"] == "pass" and cert["sensitivity"]["found"] == 1
    assert set(cert["coverage"]) == {"ops", "break_ops", "break_positions", "input_dtypes"}
    assert sum(cert["coverage"]["ops"].values()) >= 3
    text = markdown(cert)
    assert text.startswith("SIMULATED") == (bcg_kind == "sim")
    assert "planted bugs: 1 of 2 found" in text and "missed: two_planted:no_bug" in text


def test_checks_is_the_one_list_of_certify_sensitivity_and_mutation_included(monkeypatch):
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
    run = CertifyRun(CampaignConfig(target=target, device="sim"), target, "sim")
    announced = []
    results = checks.run_checks(run, lambda name, budget: announced.append((name, budget)))
    cert = certificate(run, results, "quick")
    assert announced == [("extra", 1)]
    assert [c["name"] for c in cert["checks"]] == ["extra"]
    assert cert["coverage"] == {"extra": {"runs": 1}} and cert["sensitivity"] is None
