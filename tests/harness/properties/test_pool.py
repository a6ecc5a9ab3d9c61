"""Property 1, memory-pool reuse: the library holds it, and the checker finds a private pool
per segment, closures kept alive forever, and reports strongly held arguments as memory held.
Against a one-graph capture that reserves nothing, a chain is judged by bytes: one allocator
segment is granularity, a segment per break is a cost."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import torch

from tests.property_checks import check, failing
from verification.ops.spec import TensorMeta
from verification.planted import vllm_minimal
from verification.programs import Program, Step
from verification.properties import pool
from verification.properties.base import CheckConfig
from verification.properties.pool import out_of_order_demonstration
from verification.targets import load_target


def test_library_shares_one_pool_and_frees_everything(bcg_kind, tmp_path):
    findings = check("pool", None, bcg_kind, tmp_path)
    assert not failing(findings), failing(findings)[0].message
    assert not [f for f in findings if f.kind == "memory-held"], findings


def test_out_of_order_replay_is_demonstrated_and_never_counts_against_the_target(
    bcg_kind, bcg_device
):
    config = CheckConfig(load_target("breakable_cudagraph"), bcg_kind, bcg_device, 1)
    demonstration = out_of_order_demonstration(config)
    assert demonstration.kind == "known-unsafe" and not demonstration.fails, demonstration


def test_private_pool_per_segment_is_found(bcg_kind, tmp_path):
    assert failing(check("pool", "private_pool_per_segment", bcg_kind, tmp_path))


def test_closures_kept_alive_forever_are_found(bcg_kind, tmp_path):
    assert failing(check("pool", "closures_kept_forever", bcg_kind, tmp_path))


def test_strongly_held_arguments_are_memory_held_not_a_bug(bcg_kind, tmp_path):
    findings = check("pool", "strong_arguments", bcg_kind, tmp_path)
    assert not failing(findings), failing(findings)[0].message
    held = [f for f in findings if f.kind == "memory-held"]
    assert held and "bytes" in held[0].message, findings


def test_arguments_held_by_a_target_declaring_it_releases_them_are_a_bug(bcg_kind, tmp_path):
    findings = failing(check("pool", "arguments_held_despite_declaring", bcg_kind, tmp_path))
    assert findings and "RELEASES_BREAK_ARGUMENTS" in findings[0].message, findings


def test_tensors_held_through_a_dataclass_argument_are_found(bcg_kind, tmp_path):
    assert failing(check("pool", "dataclass_arguments_held", bcg_kind, tmp_path))


def test_tensors_held_through_a_list_argument_are_found(bcg_kind, tmp_path):
    assert failing(check("pool", "list_arguments_held", bcg_kind, tmp_path))


def test_conjugate_and_negative_views_aliased_without_their_bit_are_found(bcg_kind, tmp_path):
    findings = failing(check("pool", "view_bits_dropped", bcg_kind, tmp_path))
    assert findings and "is_conj" in findings[0].message and "is_neg" in findings[0].message
    assert "subclass" not in findings[0].message


def test_a_tensor_subclass_aliased_as_a_plain_tensor_is_found(bcg_kind, tmp_path):
    findings = failing(check("pool", "subclass_aliased", bcg_kind, tmp_path))
    assert findings and "tensor subclass without its Python type" in findings[0].message
    assert "is_conj" not in findings[0].message


def test_a_dict_subclass_argument_rebuilt_as_a_plain_dict_is_found(bcg_kind, tmp_path):
    findings = failing(check("pool", "dict_subclass_rebuilt_plain", bcg_kind, tmp_path))
    assert findings and "not as ModelOutput" in findings[0].message, findings


def test_a_break_argument_that_is_neither_tensor_nor_container_is_kept_as_is(bcg_kind, tmp_path):
    findings = failing(check("pool", "every_object_opened_as_a_dataclass", bcg_kind, tmp_path))
    assert findings and "raised" in findings[0].message, findings


def test_a_drawn_program_the_target_raises_on_is_a_finding_not_a_crash(bcg_kind, bcg_device):
    # breakable-cuda-graphs 0.1.0 asserts inside a break of some drawn programs; the pool
    # check used to end in that traceback instead of a finding.
    from types import SimpleNamespace

    import torch

    from verification.planted.targets import build
    from verification.properties.pool import WITNESS, example

    clean = build(None)

    class Raising(clean.BreakableCUDAGraphCapture):
        def replay(self) -> None:
            raise AssertionError("graph_ctx is not None")

    target = load_target(SimpleNamespace(**{**vars(clean), "BreakableCUDAGraphCapture": Raising}))
    config = CheckConfig(target, bcg_kind, bcg_device, 1)
    drawn = dataclasses.replace(WITNESS, steps=WITNESS.steps[:5], outputs=(3,))  # not a witness
    problem = example(drawn, {}, config)
    assert problem is not None and "the target raised AssertionError" in problem, problem
    assert not torch.cuda.is_current_stream_capturing()


# A program whose only step is a break on an input: captured as one graph, it allocates
# nothing in its pool, so a ratio to it would make any byte a chain reserves a finding.
_NOTHING_IN_THE_POOL = Program(
    (TensorMeta((64,), torch.float32),), (Step("do_nothing", (0,), (), True),), (0,)
)


def _placeholder_in_each_segment(private_pools: bool) -> SimpleNamespace:
    """vLLM's minimal target allocating a placeholder tensor as each segment opens (as a weak
    reference built over ``torch.empty(())`` inside a capture does), each segment in a pool of
    its own where ``private_pools``."""

    class Capture(vllm_minimal._Capture):
        def _open_segment(self) -> None:
            if private_pools:
                self.pool = torch.cuda.graph_pool_handle()
            super()._open_segment()
            torch.empty((), device="cuda")  # a few bytes, freed at once, in the segment's pool

    clean = vllm_minimal.build()
    return SimpleNamespace(**{**vars(clean), "BreakableCUDAGraphCapture": Capture})


def _ratio(target: SimpleNamespace, kind: str, device: str) -> str | None:
    config = CheckConfig(load_target(target), kind, device, 1)
    return pool._ratio_problem(_NOTHING_IN_THE_POOL, config, [])


def test_one_allocator_segment_against_a_one_graph_capture_reserving_nothing_is_no_finding(
    bcg_kind, bcg_device
):
    # The placeholder reserves one 2 MiB segment where the one-graph capture reserves none: the
    # allocator's granularity, not a cost of the breaks.
    assert _ratio(_placeholder_in_each_segment(private_pools=False), bcg_kind, bcg_device) is None


def test_a_segment_per_break_against_a_one_graph_capture_reserving_nothing_is_found_in_bytes(
    bcg_kind, bcg_device
):
    problem = _ratio(_placeholder_in_each_segment(private_pools=True), bcg_kind, bcg_device)
    assert problem is not None
    assert problem.startswith(
        "a capture with 1 breaks reserves 4194304 bytes of graph pool where the same program "
        "captured as one graph reserves 0: 2097152 bytes more than the one 2097152-byte "
        "allocator segment that any allocation inside a capture reserves"
    ), problem
    assert "x the" not in problem  # no ratio to nothing
