"""What reaches a user of the command line: the warnings the harness provokes on purpose are
dropped, and any other warning is one line that says whose code raised it."""

from __future__ import annotations

import warnings
from pathlib import Path

from verification import errors


def _warn(message: str, filename: str) -> None:
    warnings.warn_explicit(message, UserWarning, filename, 12)


def test_the_harness_own_expected_warnings_are_dropped_and_others_say_whose(capsys):
    harness_file = str(Path(errors.__file__).parent / "fuzz.py")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        errors.hide_expected_warnings()
        for expected in errors.EXPECTED_WARNINGS:
            _warn(f"{expected} (details)", harness_file)
        _warn("deprecated knob\nsecond line", "/srv/engine/attention_break.py")
        _warn("something odd", harness_file)
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "warning from the target (/srv/engine/attention_break.py:12): UserWarning: deprecated knob",
        f"warning from the harness ({harness_file}:12): UserWarning: something odd",
    ]


def test_a_warning_the_target_logs_is_one_line_saying_whose_and_a_repeat_is_not_shown(
    capsys, monkeypatch
):
    import logging

    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    errors.hide_expected_warnings()
    peer = logging.getLogger("breakable_cuda_graphs")
    for _ in range(3):
        peer.warning("CUDA graph cleanup failed: %s", "a previous error during capture")
    peer.info("not a warning")
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "warning from the target (logger breakable_cuda_graphs): WARNING: CUDA graph cleanup "
        "failed: a previous error during capture (shown once)"
    ]
