"""Property 3, thread isolation: the library holds it under every capture_error_mode, and the
checker finds a process-global active capture and another thread's add_eager recorded."""

from __future__ import annotations

from tests.property_checks import check, failing
from verification.devices import device_context
from verification.planted.property_targets import build
from verification.planted.vllm_minimal import build as minimal
from verification.properties.base import CheckConfig
from verification.properties.pool import WITNESS
from verification.properties.processes import run_properties
from verification.properties.threads import MODES, _others_during_capture, modes_of
from verification.targets import load_target


def test_every_capture_error_mode_is_exercised_for_the_library():
    assert modes_of(load_target("breakable_cudagraph").module) == MODES


def test_library_keeps_captures_per_thread(bcg_kind, tmp_path):
    findings = failing(check("threads", None, bcg_kind, tmp_path))
    assert not findings, findings[0].message


def test_process_global_active_capture_is_found(bcg_kind, tmp_path):
    assert failing(check("threads", "global_active_capture", bcg_kind, tmp_path))


def test_add_eager_taken_from_another_thread_is_found(bcg_kind, tmp_path):
    findings = failing(check("threads", "add_eager_from_any_thread", bcg_kind, tmp_path))
    assert findings and "add_eager" in findings[0].message, findings


def test_process_global_active_capture_is_found_under_out_buffer(bcg_kind, tmp_path):
    # vLLM's runner captures from one thread at a time; that duty leaves other threads free to
    # call decorated ops eagerly during a capture, so it excuses no process-global capture.
    variant = "global_active_capture_under_out_buffer"
    assert load_target(build(variant)).contract.name == "out-buffer"
    assert failing(check("threads", variant, bcg_kind, tmp_path))
    # The scenario of other threads' eager calls finds it by itself, in every mode.
    target = load_target(build(variant))
    with device_context(bcg_kind) as device:
        config = CheckConfig(target, bcg_kind, device, 1)
        for mode in modes_of(target.module):
            problem = _others_during_capture(WITNESS, 1, 2, mode, config)
            assert problem is not None and "not per thread" in problem, (mode, problem)


def test_vllm_minimal_keeps_captures_per_thread(bcg_kind):
    target = load_target(minimal(None))
    (result,) = run_properties("threads", target, bcg_kind, 10)
    assert not result.failed, [f.message for f in result.findings]


def test_cublas_refusing_a_first_handle_during_another_global_capture_is_not_a_bug():
    from verification.properties.threads import _global_mode_error

    refused = RuntimeError(
        "CUDA error: CUBLAS_STATUS_INTERNAL_ERROR when calling `cublasCreate(handle)`"
    )
    assert _global_mode_error("global", refused)
    assert not _global_mode_error("thread_local", refused)
    assert not _global_mode_error("global", RuntimeError("index out of range"))
