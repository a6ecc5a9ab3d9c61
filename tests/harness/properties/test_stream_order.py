"""Property 5, stream order: the library orders eager steps with its graphs, and the checker
finds eager steps on an unordered side stream deterministically: by the simulator's race
detector, and on a GPU by the sleep amplifier (every run, not once in a thousand)."""

from __future__ import annotations

from tests.property_checks import check, failing


def test_library_orders_eager_steps_with_its_graphs(bcg_kind, tmp_path):
    findings = failing(check("stream-order", None, bcg_kind, tmp_path))
    assert not findings, findings[0].message


def test_eager_steps_on_an_unordered_side_stream_are_found_every_time(bcg_kind, tmp_path):
    for _ in range(2):
        findings = failing(check("stream-order", "unordered_side_stream", bcg_kind, tmp_path))
        assert findings


def test_a_capture_from_the_default_stream_that_does_not_wait_for_it_is_found(bcg_kind, tmp_path):
    # The witness captured from the default stream finds it every time, whatever is drawn.
    findings = check("stream-order", "capture_ignores_the_default_stream", bcg_kind, tmp_path)
    found = failing(findings)
    assert found, f"no failing finding; the check reported {[f.message for f in findings]}"
    assert "from the default stream" in found[0].message, found[0].message


class _Event:
    def __init__(self, done: bool) -> None:
        self.done = done

    def query(self) -> bool:
        return self.done


def _hold(monkeypatch, half_over: bool):
    import torch

    from verification.properties.stream_order import WriterHold

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    hold = WriterHold("cuda")
    hold._half = _Event(half_over)
    return hold


def test_a_reader_that_comes_while_the_hold_lasts_is_judged(monkeypatch):
    hold = _hold(monkeypatch, half_over=False)
    hold.reading()
    assert not hold.lapsed


def test_a_reader_that_comes_after_half_the_hold_is_not_judged(monkeypatch):
    hold = _hold(monkeypatch, half_over=True)
    hold.reading()
    assert hold.lapsed


def test_a_trial_whose_reader_came_late_runs_again_with_a_hold_four_times_as_long():
    from verification.properties.stream_order import SLEEP_CYCLES, held_trials

    holds = []

    def trial(hold):
        holds.append(hold.cycles)
        hold.lapsed = len(holds) < 3  # the host was slow twice
        return None

    assert held_trials("cuda", trial) is None
    assert holds == [SLEEP_CYCLES, 4 * SLEEP_CYCLES, 16 * SLEEP_CYCLES]


def test_a_stale_read_is_a_problem_even_when_the_hold_had_lapsed():
    from verification.properties.stream_order import held_trials

    def trial(hold):
        hold.lapsed = True
        return "stale"

    assert held_trials("cuda", trial) == "stale"


def test_holds_that_all_lapse_are_a_harness_error_never_a_pass(monkeypatch, bcg_kind, bcg_device):
    from verification.findings import HARNESS_ERROR
    from verification.properties import stream_order
    from verification.properties.base import CheckConfig
    from verification.targets import load_target

    def lapsing(config, side):
        def trial(hold):
            hold.lapsed = True

        return stream_order.held_trials("cuda", trial)

    monkeypatch.setattr(stream_order, "_witness", lapsing)
    config = CheckConfig(load_target("breakable_cudagraph"), bcg_kind, bcg_device, examples=1)
    (finding,) = stream_order.check(config).findings
    assert finding.kind == HARNESS_ERROR and "holds up to" in finding.message, finding.message


def test_a_target_whose_runner_captures_from_its_own_stream_is_never_captured_from_the_default(
    bcg_kind, bcg_device
):
    from verification.properties.runs import CAPTURE_STREAMS, capture_streams
    from verification.targets import load_target

    assert capture_streams(load_target("breakable_cudagraph")) == CAPTURE_STREAMS
    vllm_minimal = load_target("verification.planted.vllm_minimal")
    assert "default" not in capture_streams(vllm_minimal)


def test_a_target_that_raises_is_a_finding_not_a_crashed_check(bcg_kind, bcg_device):
    # The PyPI peer refuses breaks that return a tensor; on the H200 that killed the check.
    import types

    import breakable_cudagraph
    from verification.properties import stream_order
    from verification.properties.base import CheckConfig
    from verification.targets import load_target

    def refusing(fn):
        def wrapper(*args, **kwargs):
            if breakable_cudagraph.BreakableCUDAGraphCapture.current() is not None:
                raise RuntimeError("refused")
            return fn(*args, **kwargs)

        return wrapper

    target = types.SimpleNamespace(
        __name__="refusing",
        BreakableCUDAGraphCapture=breakable_cudagraph.BreakableCUDAGraphCapture,
        eager_break_during_capture=refusing,
    )
    config = CheckConfig(load_target(target), bcg_kind, bcg_device, examples=2)
    # Only one failing finding: a target that refuses every break cannot go on (skipped).
    (finding,) = [f for f in stream_order.check(config).findings if f.fails]
    assert (
        finding.kind == "target-bug"
        and "the target raised RuntimeError('refused')" in finding.message
    )
