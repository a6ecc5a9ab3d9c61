"""A finding names the frame of the target that raised, and findings of one cause are one bug:
however many checks reach it, and never merged with another bug of the same exception type."""

from __future__ import annotations

import torch

from verification.causes import describe, raised_by_harness, raised_in, target_frame
from verification.devices import device_context
from verification.errors import UsageError
from verification.findings import TARGET_BUG, Finding, root_causes
from verification.planted.property_targets import build
from verification.targets import load_target
from verification.targets.contracts import get_contract


def _nested_assertion(kind: str) -> AssertionError:
    """The planted ``nested_break_asserts`` bug, raised for real: a decorated op calling a
    decorated op during a capture."""
    target = build("nested_break_asserts")

    @target.eager_break_during_capture
    def inner(t: torch.Tensor) -> None:
        t.add_(1)

    @target.eager_break_during_capture
    def outer(t: torch.Tensor) -> None:
        inner(t)

    with device_context(kind) as device:
        x = torch.zeros(4, device=device)
        side = torch.cuda.Stream()
        try:
            with torch.cuda.stream(side), target.BreakableCUDAGraphCapture():
                outer(x * 2)
        except AssertionError as error:
            return error
    raise AssertionError("the planted nested bug did not raise")


def _first_bug() -> None:
    raise AssertionError


def _second_bug() -> None:
    raise AssertionError


def _raised(fn) -> AssertionError:
    try:
        fn()
    except AssertionError as error:
        return error
    raise RuntimeError(f"{fn.__name__} did not raise")


def test_an_exception_names_the_targets_file_line_and_function(bcg_kind):
    error = _nested_assertion(bcg_kind)
    frame = target_frame(error)
    assert frame is not None
    assert frame.path.endswith("verification/planted/property_targets.py")
    assert frame.function == "eager_break" and frame.line > 0
    text = describe(error)
    assert text.startswith("AssertionError()") and f"[at {frame}]" in text
    raised = raised_in(f"capturer 1: the capture raised {text}")
    assert raised is not None and raised.exception == "AssertionError" and raised.frame == frame
    assert not raised_by_harness(error)  # a planted target is code under test


def test_one_bug_through_four_checks_is_one_root_cause_seen_through_four(bcg_kind):
    text = describe(_nested_assertion(bcg_kind))
    # Each check words what it was doing its own way; the frame is the same.
    findings = [
        Finding(TARGET_BUG, "pool", f"the target raised {text}"),
        Finding(TARGET_BUG, "threads", f"capturer 0, capturing alone: the capture raised {text}"),
        Finding(TARGET_BUG, "faults", f"the next capture into the same pool raised {text}"),
        Finding(TARGET_BUG, "stream-order", f"the target raised {text}"),
    ]
    (cause,) = root_causes(findings)
    assert cause.seen_through == ["pool", "threads", "faults", "stream-order"]
    assert cause.also_line() == "also seen through: threads, faults, stream-order"


def test_two_bugs_of_one_exception_type_from_two_frames_stay_two():
    first, second = describe(_raised(_first_bug)), describe(_raised(_second_bug))
    findings = [
        Finding(TARGET_BUG, "pool", f"the target raised {first}"),
        Finding(TARGET_BUG, "pool", f"the target raised {second}"),
        Finding(TARGET_BUG, "faults", f"the target raised {second}"),
    ]
    causes = root_causes(findings)
    assert [c.seen_through for c in causes] == [["pool"], ["pool", "faults"]]
    assert causes[0].finding.where != causes[1].finding.where


def test_findings_without_an_exception_are_one_cause_per_check_and_symptom():
    findings = [
        Finding(TARGET_BUG, "pool", "output 0: 3 of 8 elements differ"),
        Finding(TARGET_BUG, "pool", "output 1: 5 of 8 elements differ"),
        Finding(TARGET_BUG, "faults", "output 0: 3 of 8 elements differ"),
    ]
    assert [c.seen_through for c in root_causes(findings)] == [["pool"], ["faults"]]


def test_an_error_of_the_harness_is_told_from_the_targets():
    # The harness's own code is verification/ (but its planted targets and adapters); this
    # test file stands for code under test.
    for harness_call in (lambda: get_contract("no-such-contract"), lambda: load_target("no.x")):
        try:
            harness_call()
        except UsageError as error:
            assert raised_by_harness(error)
        else:
            raise AssertionError("the harness accepted a bad name")
    assert not raised_by_harness(_raised(_first_bug))
