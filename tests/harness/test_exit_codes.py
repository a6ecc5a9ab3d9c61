"""Exit codes: 0 nothing found, 1 a bug of the target or an op, 2 usage, 3 the harness failed;
each command's --help says so."""

from __future__ import annotations

import pytest

from verification import properties
from verification.commands import check
from verification.commands.cli import build_parser, main
from verification.errors import EXIT_FOUND, EXIT_HARNESS, EXIT_OK, EXIT_USAGE
from verification.findings import HARNESS_ERROR, MEMORY_HELD, TARGET_BUG, Finding, exit_status
from verification.properties import Property
from verification.properties.base import CheckResult

ARGV = ["check", "faults", "--device", "sim", "--no-isolate", "--examples", "1"]


def test_exit_status_of_findings():
    assert exit_status([]) == EXIT_OK
    assert exit_status([Finding(MEMORY_HELD, "pool", "1 MiB")]) == EXIT_OK
    assert exit_status([Finding(TARGET_BUG, "pool", "x")]) == EXIT_FOUND
    both = [Finding(TARGET_BUG, "pool", "x"), Finding(HARNESS_ERROR, "faults", "y")]
    assert exit_status(both) == EXIT_HARNESS


def test_a_run_ending_on_a_harness_error_exits_3(monkeypatch, capsys):
    def broken(config):
        return CheckResult("faults", 1, 0.0, [Finding(HARNESS_ERROR, "faults", "checker broke")])

    faults = properties.PROPERTIES["faults"]
    monkeypatch.setitem(
        properties.PROPERTIES, "faults", Property("faults", faults.contract, broken, faults.example)
    )
    assert main(ARGV) == EXIT_HARNESS
    assert "harness-error" in capsys.readouterr().out


def test_an_exception_of_the_harness_exits_3_with_its_traceback(monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug of the harness")

    monkeypatch.setattr(check, "run_properties", broken)
    assert main(ARGV) == EXIT_HARNESS
    err = capsys.readouterr().err
    assert "Traceback" in err and "the harness itself failed" in err


def test_a_usage_error_exits_2():
    assert main(["check", "no-such-property"]) == EXIT_USAGE


@pytest.mark.parametrize("command", ["fuzz", "check", "fuzz-op", "certify", "mutate"])
def test_every_commands_help_states_the_exit_codes(command):
    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices[command]
    text = sub.format_help()
    assert "3 the harness itself failed" in text and "2 bad input" in text
