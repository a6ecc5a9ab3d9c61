"""Property 3, thread isolation: the library holds it under every capture_error_mode, and the
checker finds a process-global active capture and another thread's add_eager recorded."""

from __future__ import annotations

from tests.property_checks import check, failing
from verification.properties.threads import MODES, modes_of
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
