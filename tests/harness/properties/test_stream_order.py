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
    (finding, *_) = failing(
        check("stream-order", "capture_ignores_the_default_stream", bcg_kind, tmp_path)
    )
    assert "from the default stream" in finding.message, finding.message


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
