"""A finding names the frame of the target that raised, and findings of one cause are one bug:
however many checks reach it, in whatever words, and never merged with another bug of the same
exception type; the merged finding shows the most specific explanation any check gave."""

from __future__ import annotations

import contextlib

import pytest
import torch

from verification.causes import (
    Cause,
    Problem,
    describe,
    raised_by_harness,
    raised_cause,
    raised_in,
    target_frame,
)
from verification.devices import device_context
from verification.errors import UsageError
from verification.execute import BreakLog
from verification.findings import TARGET_BUG, Finding, root_causes
from verification.ops.spec import TensorMeta
from verification.oracle import check_program
from verification.planted.check_targets import build as build_check_target
from verification.planted.property_targets import build
from verification.programs import Program, Step
from verification.properties.base import CheckConfig
from verification.properties.pool import container_as_given_problem
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


def _property(check: str, message: str, cause: Cause | None = None) -> Finding:
    return Finding(TARGET_BUG, check, message, explained=cause)


def test_a_fault_at_two_points_through_one_function_is_one_cause_and_through_two_stays_two():
    # Where the fault struck is how the bug was reached; the function it went through and
    # the state it left say which cleanup is missing.
    left = "a capture is still active in this thread"
    opened = Cause("fault-cleanup", f"{left} [through m.py:12, in open]")
    closed = Cause("fault-cleanup", f"{left} [through m.py:40, in close]")
    begin = _property("faults", f"after a fault at capture-begin #0: {left}", opened)
    handle = _property("faults", f"after a fault at pool-handle #0: {left}", opened)
    other = _property("faults", f"after a fault at capture-end-at-exit #0: {left}", closed)
    assert len(root_causes([begin, handle, other])) == 2


def test_a_nested_capture_the_target_does_not_refuse_is_one_cause_wherever_it_is_opened():
    not_refused = Cause("nested-capture", "a nested capture")
    findings = [
        _property("nested", "a nested capture (eager-step) was let through", not_refused),
        _property("nested", "a nested capture (decorated-op) was let through", not_refused),
        _property("nested", "a nested capture was refused only by torch", not_refused),
    ]
    causes = root_causes(findings)
    assert len(causes) == 1 and len(causes[0].others) == 2
    # What the outer capture did after it is a bug of its own.
    after = _property(
        "nested", "after a nested capture (capture, before step 1): a capture is still active"
    )
    assert len(root_causes([*findings, after])) == 2


def test_a_new_check_in_new_words_merges_by_its_cause_with_no_table_entry():
    # No table maps wording to causes: a check never seen before, naming the same cause as a
    # value, is the same root cause; the same words with another cause are another.
    copied = Cause("capture-time-copy", "a list host argument")
    fuzzed = _property(
        "fuzz", "break step 2 (attention): the list ... a copy made at capture", copied
    )
    novel = _property("brand-new-check", "seq_lens went stale between runs (zzz)", copied)
    unrelated = _property("brand-new-check", "seq_lens went stale between runs (zzz)")
    causes = root_causes([fuzzed, novel, unrelated])
    assert [c.seen_through for c in causes] == [["fuzz", "brand-new-check"], ["brand-new-check"]]


def test_the_most_specific_explanation_is_shown_and_every_check_still_listed(bcg_kind):
    # The fuzzer reaches the planted nested-op bug first, as a bare exception; the nested
    # check names the construct. One cause, shown in the nested check's words.
    error = _nested_assertion(bcg_kind)
    bare = Cause("raised", frame=target_frame(error), exception="AssertionError")
    fuzzed = _property("fuzz", f"capture raised {describe(error)}", bare)
    nested = _property(
        "nested",
        f"a decorated op calling a decorated op failed the capture: {describe(error)}",
        raised_cause(error, "nested-op", "a decorated op called a decorated op"),
    )
    (cause,) = root_causes([fuzzed, nested])
    assert cause.finding is nested and cause.seen_through == ["nested", "fuzz"]
    assert cause.finding.cause.words().startswith("a decorated op called a decorated op")


def test_an_exception_raised_by_a_decorated_op_called_from_a_break_names_the_nesting(bcg_kind):
    # The fuzzer's program calls the inner op from a break's body (compiled by the harness):
    # the raise passed the target again after that body, which is the construct.
    target = build("nested_break_asserts")
    namespace = {"eager_break_during_capture": target.eager_break_during_capture}
    source = (
        "@eager_break_during_capture\ndef inner(t):\n    t.add_(1)\n\n"
        "@eager_break_during_capture\ndef outer(t):\n    inner(t)\n"
    )
    exec(compile(source, "<break op outer_inner>", "exec"), namespace)
    with device_context(bcg_kind) as device:
        x = torch.zeros(4, device=device)
        with pytest.raises(AssertionError) as raised:
            with torch.cuda.stream(torch.cuda.Stream()), target.BreakableCUDAGraphCapture():
                namespace["outer"](x * 2)
    assert raised_cause(raised.value).kind == "nested-op"
    assert raised_cause(_raised(_first_bug)).kind == "raised"  # no break body on the way


def test_a_crash_inside_a_construct_is_one_cause_with_what_that_construct_raises(tmp_path):
    # A child that died inside the nested check's nested capture (a GPU abort) and another
    # check's exception for the same construct are one root cause.
    from verification import breadcrumbs
    from verification.properties.processes import _crash_result

    trail = tmp_path / "trail"
    breadcrumbs.lay(trail)
    try:  # what a child that dies inside the blocks leaves: entries, never their leaving
        with breadcrumbs.scenario("nested drawn example 3"):
            breadcrumbs._write("enter", "the capture of the program")
            breadcrumbs._write("enter", breadcrumbs.CONSTRUCT + "a nested capture")
    finally:
        breadcrumbs.lay(None)
    assert breadcrumbs.open_constructs(trail) == ["a nested capture"]
    (crash,) = _crash_result(
        "nested",
        -6,
        "what():  The graph should be registered",
        ["thread A: ..."],
        ["a nested capture"],
    ).findings
    raised = _property(
        "faults",
        "a nested capture was refused only by torch",
        Cause("nested-capture", "a nested capture"),
    )
    (cause,) = root_causes([crash, raised])
    assert cause.finding is raised and cause.seen_through == ["faults", "nested"]
    # Without a construct the crash is only its symptom.
    (bare,) = _crash_result("nested", -6, "", [], []).findings
    assert len(root_causes([bare, raised])) == 2


def test_a_namedtuple_made_a_tuple_is_one_cause_for_the_fuzzer_and_the_pool_check(bcg_kind):
    # The break's own code trips over the tuple (an AttributeError in the op); the fuzzer
    # names the handing instead, in the pool check's words, so the two are one bug.
    target = load_target(build_check_target("namedtuple_rebuilt_plain"))
    meta = TensorMeta((16,), torch.float32)
    # Capture intermediates, as the pool check gives: inputs are static, held as they are.
    steps = (Step("exp", (0,), (), False), Step("sin", (1,), (), False))
    program = Program((meta, meta), (*steps, Step("shrink_pair_", (2, 3), (), True)), (4,))
    with device_context(bcg_kind) as device:
        fuzzed = check_program(program, target, device)
        pool = container_as_given_problem("namedtuple", CheckConfig(target, bcg_kind, device, 1))
    assert fuzzed is not None and fuzzed.violation == "break-arg-types", fuzzed
    assert "reached it at replay as tuple, not as namedtuple" in fuzzed.message
    assert pool is not None
    assert isinstance(pool, Problem)
    causes = root_causes([fuzzed, _property("pool", pool, pool.cause)])
    assert len(causes) == 1 and causes[0].seen_through == ["fuzz", "pool"]
    # On the library, the same program passes.
    with device_context(bcg_kind) as device:
        assert check_program(program, load_target("breakable_cudagraph"), device) is None


def test_a_target_calling_a_break_with_arguments_it_does_not_take_is_the_targets_bug():
    # The TypeError of a bad call is raised in the caller's frame, here the harness's wrapper
    # that logs the break's calls; the wrapper only hands the call on, so the target called.
    log = BreakLog()

    def op(x: int, *, out: int) -> int:
        return x + out

    logged = log.wrap(0, op)

    def replay_with_keywords_flattened() -> int:  # stands for the target's replay
        return logged(1, 2)

    try:
        replay_with_keywords_flattened()
    except TypeError as error:
        assert not raised_by_harness(error)
        assert target_frame(error) is not None
        assert target_frame(error).function == "replay_with_keywords_flattened"
    else:
        raise AssertionError("the bad call did not raise")


# Simulator only: on a GPU the graph whose capture the sync invalidated may abort the process
# when freed, which would take the test worker with it.
@pytest.mark.sim
def test_a_check_tripping_over_a_stream_left_capturing_blames_the_target(bcg_kind):
    # The checker's own CUDA call fails while a stream it never left capturing still is: a
    # capture of the target's left it so, and the finding says that, not "the harness broke".
    from verification.properties.base import error_finding
    from verification.properties.runs import settle

    with device_context(bcg_kind):
        side = torch.cuda.Stream()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(side):
            graph.capture_begin()
            try:
                settle(bcg_kind)  # synchronizes: illegal while capturing
            except RuntimeError as error:
                found = error_finding("threads", error)
            else:
                raise AssertionError("a sync during a capture did not raise")
            with contextlib.suppress(RuntimeError):
                graph.capture_end()
    assert found.kind == TARGET_BUG and "left the caller's stream capturing" in found.message
    assert error_finding("threads", RuntimeError("x")).kind == TARGET_BUG  # raised here
