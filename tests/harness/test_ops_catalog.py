"""The op catalog keeps its promises: ``infer`` predicts real outputs, ``expr`` text computes
the same as ``run``, params strategies only draw valid params, ``mutates``/``aliasing`` are
honest, and break ops run (also on NaN inputs) deterministically.
"""

from __future__ import annotations

import random as pyrandom
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from verification.ops import ALL_OPS, BREAK_OPS, CAPTURABLE, INPUT_DTYPES, get_op, render
from verification.ops.spec import OpSpec, TensorMeta

SHAPES = [(), (1,), (3,), (4,), (1, 4), (3, 1), (3, 4), (4, 3), (4, 4), (2, 1, 4), (2, 3, 4)]
SHAPES += [(2, 4, 3), (2, 4, 4), (2, 3, 4, 2)]
POOL = [TensorMeta(s, d) for s in SHAPES for d in INPUT_DTYPES]
# A third of the profile's examples per op (8 under ci): there are ~150 ops to cover.
FEW = settings(max_examples=max(8, settings.default.max_examples // 3), deadline=None)


def candidate_metas(spec: OpSpec, count: int = 6) -> list[tuple[TensorMeta, ...]]:
    """Input metas the op applies to, found by seeded random search over a small pool."""
    rng = pyrandom.Random(spec.name)
    found: list[tuple[TensorMeta, ...]] = []
    for _ in range(30000):
        metas = tuple(rng.choice(POOL) for _ in range(spec.arity))
        if metas not in found and spec.infer(metas, {}) is not None:
            found.append(metas)
            if len(found) == count:
                break
    return found


CANDIDATES = {name: candidate_metas(spec) for name, spec in ALL_OPS.items()}


def make_tensor(meta: TensorMeta, seed: int, device: str, strided: bool) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if meta.dtype.is_floating_point:
        t = torch.randn(meta.shape, generator=gen) * 2
    elif meta.dtype == torch.bool:
        t = torch.rand(meta.shape, generator=gen) > 0.5
    else:
        t = torch.randint(-6, 7, meta.shape, generator=gen)
    t = t.to(device=device, dtype=meta.dtype)
    # Same values, transposed storage: ops must not assume contiguous inputs.
    return t.mT.contiguous().mT if strided and t.dim() >= 2 else t


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.is_floating_point:
        return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(0), b.nan_to_num(0))
    return torch.equal(a, b)


def meta_of(t: torch.Tensor) -> TensorMeta:
    return TensorMeta(tuple(t.shape), t.dtype)


def shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


Trial = tuple[OpSpec, tuple[TensorMeta, ...], dict[str, Any], list[torch.Tensor]]


def draw_trial(data: st.DataObject, name: str, device: str = "cpu", strided: bool = True) -> Trial:
    spec = ALL_OPS[name]
    candidates = CANDIDATES[name]
    metas = candidates[data.draw(st.integers(0, len(candidates) - 1), label="metas")]
    params = data.draw(spec.params(metas), label="params")
    seed = data.draw(st.integers(0, 2**16), label="seed")
    layout = strided and data.draw(st.booleans(), label="strided")
    inputs = [make_tensor(m, seed + i, device, layout) for i, m in enumerate(metas)]
    return spec, metas, params, inputs


def call(fn: Callable[..., Any], inputs: Sequence[torch.Tensor], params: dict[str, Any]) -> Any:
    torch.manual_seed(0)
    return fn(*inputs, **params)


def clones(inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [t.clone() for t in inputs]


def test_catalog_has_enough_ops_of_each_kind() -> None:
    assert len(CAPTURABLE) >= 60
    assert len(BREAK_OPS) >= 12
    assert all(s.kind == "capturable" and s.run is not None for s in CAPTURABLE.values())
    assert all(s.kind == "break" and s.source and s.entry for s in BREAK_OPS.values())
    assert ALL_OPS == {**CAPTURABLE, **BREAK_OPS}


def test_input_dtypes_start_with_float32_and_cover_the_cast_targets() -> None:
    assert INPUT_DTYPES[0] == torch.float32
    assert set(INPUT_DTYPES) == {
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.bool,
    }


def test_get_op_unknown_name_raises_key_error_naming_close_matches() -> None:
    assert get_op("matmul") is CAPTURABLE["matmul"]
    with pytest.raises(KeyError, match=r"did you mean.*matmul"):
        get_op("matmull")


def test_writing_ops_declare_their_destination() -> None:
    for spec in ALL_OPS.values():
        if spec.aliasing in ("inplace", "out"):
            assert spec.mutates, spec.name
        if spec.mutates:
            assert spec.aliasing in ("inplace", "out"), spec.name


@pytest.mark.parametrize("name", sorted(ALL_OPS))
def test_op_applies_to_some_input_metas(name: str) -> None:
    assert CANDIDATES[name], f"{name}: infer accepted none of the pool's metas"


@pytest.mark.parametrize("name", sorted(ALL_OPS))
@FEW
@given(data=st.data())
def test_params_strategy_draws_only_params_infer_accepts(name: str, data: st.DataObject) -> None:
    spec = ALL_OPS[name]
    for metas in CANDIDATES[name]:
        params = data.draw(spec.params(metas))
        assert spec.infer(metas, params) is not None, (metas, params)


@pytest.mark.parametrize("name", sorted(CAPTURABLE))
@FEW
@given(data=st.data())
def test_infer_predicts_real_output_shape_and_dtype(name: str, data: st.DataObject) -> None:
    spec, metas, params, inputs = draw_trial(data, name)
    out = call(spec.callable_for(lambda f: f), inputs, params)
    assert meta_of(out) == spec.infer(metas, params)


@pytest.mark.parametrize("name", sorted(CAPTURABLE))
@FEW
@given(data=st.data())
def test_expr_text_computes_bitwise_the_same_as_run(name: str, data: st.DataObject) -> None:
    spec, _, params, inputs = draw_trial(data, name)
    expected = call(spec.run, clones(inputs), params)
    names = [f"t{i}" for i in range(len(inputs))]
    namespace = {"torch": torch, **dict(zip(names, clones(inputs)))}
    torch.manual_seed(0)
    got = eval(render(spec, names, params), namespace)
    assert same_values(got, expected), render(spec, names, params)


@pytest.mark.parametrize("name", sorted(CAPTURABLE))
@FEW
@given(data=st.data())
def test_only_listed_inputs_are_mutated_and_the_destination_returned(
    name: str, data: st.DataObject
) -> None:
    spec, _, params, inputs = draw_trial(data, name)
    before = clones(inputs)
    out = call(spec.run, inputs, params)
    for i, (t, old) in enumerate(zip(inputs, before)):
        if i not in spec.mutates:
            assert same_values(t, old), f"input {i} changed but is not in mutates"
    if spec.mutates:
        assert out is inputs[spec.mutates[0]]
    elif spec.aliasing == "none":
        assert not any(shares_memory(out, t) for t in inputs), "output aliases an input"


@pytest.mark.parametrize("name", sorted(n for n, s in CAPTURABLE.items() if s.aliasing == "view"))
@FEW
@given(data=st.data())
def test_view_ops_share_memory_with_a_contiguous_input(name: str, data: st.DataObject) -> None:
    spec, _, params, inputs = draw_trial(data, name, strided=False)
    out = call(spec.run, inputs, params)
    assert shares_memory(out, inputs[0])
    if spec.overlapping and out.numel() > inputs[0].numel():
        with pytest.raises(RuntimeError):
            out.add_(1)


@pytest.mark.parametrize("name", sorted(n for n, s in CAPTURABLE.items() if s.rng))
def test_rng_ops_depend_on_the_generator_state(name: str) -> None:
    spec = CAPTURABLE[name]
    metas = CANDIDATES[name][0]
    params = {"p": 0.5} if "{p}" in spec.expr else {}
    first = spec.run(*[torch.ones(m.shape, dtype=m.dtype) for m in metas], **params)
    second = spec.run(*[torch.ones(m.shape, dtype=m.dtype) for m in metas], **params)
    assert first.numel() < 4 or not torch.equal(first, second)


@pytest.mark.parametrize("name", sorted(BREAK_OPS))
@FEW
@given(data=st.data())
def test_break_op_runs_matches_infer_and_mutates_only_listed_inputs(
    name: str, data: st.DataObject
) -> None:
    spec, metas, params, inputs = draw_trial(data, name)
    before = clones(inputs)
    out = call(spec.callable_for(lambda f: f), inputs, params)
    if spec.outputs == 0:
        assert out is None
    else:
        assert meta_of(out) == spec.infer(metas, params)
    for i, (t, old) in enumerate(zip(inputs, before)):
        if i not in spec.mutates:
            assert same_values(t, old), f"input {i} changed but is not in mutates"
    if spec.mutates:
        assert out is inputs[spec.mutates[0]]
    elif out is not None:
        assert not any(shares_memory(out, t) for t in inputs), "output aliases an input"


@pytest.mark.parametrize("name", sorted(n for n, s in BREAK_OPS.items() if not s.rng))
@FEW
@given(data=st.data())
def test_break_op_is_a_deterministic_function_of_its_inputs(name: str, data: st.DataObject) -> None:
    spec, _, params, inputs = draw_trial(data, name)
    first_inputs, second_inputs = clones(inputs), clones(inputs)
    fn = spec.callable_for(lambda f: f)
    first, second = fn(*first_inputs, **params), fn(*second_inputs, **params)
    if first is not None:
        assert same_values(first, second)
    assert all(same_values(a, b) for a, b in zip(first_inputs, second_inputs))


@pytest.mark.parametrize("name", sorted(BREAK_OPS))
def test_break_op_tolerates_nan_inputs(name: str) -> None:
    spec = BREAK_OPS[name]
    for metas in CANDIDATES[name]:
        inputs = [make_tensor(m, 0, "cpu", False) for m in metas]
        for t in inputs:
            if t.dtype.is_floating_point:
                t.fill_(float("nan"))
        params = {"weight": 0.5} if "{weight}" in spec.expr else {}
        out = spec.callable_for(lambda f: f)(*inputs, **params)
        if spec.outputs:
            assert meta_of(out) == spec.infer(metas, params)


@pytest.mark.parametrize("name", sorted(BREAK_OPS))
def test_break_op_calls_through_a_decorated_function_and_matches_its_expr(name: str) -> None:
    spec = BREAK_OPS[name]
    calls: list[str] = []

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls.append(fn.__name__)
            return fn(*args, **kwargs)

        return wrapper

    metas = CANDIDATES[name][0]
    params = {"weight": 0.5} if "{weight}" in spec.expr else {}
    inputs = [make_tensor(m, 1, "cpu", False) for m in metas]
    out = call(spec.callable_for(decorate), clones(inputs), params)
    assert calls, f"{name} never entered a decorated function"
    namespace: dict[str, Any] = {"eager_break_during_capture": lambda f: f}
    exec(spec.source, namespace)
    names = [f"t{i}" for i in range(len(inputs))]
    namespace.update(zip(names, clones(inputs)))
    torch.manual_seed(0)
    got = eval(render(spec, names, params), namespace)
    assert (got is None and out is None) or same_values(got, out)


def test_nested_break_decorates_both_outer_and_inner() -> None:
    calls: list[str] = []

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls.append(fn.__name__)
            return fn(*args, **kwargs)

        return wrapper

    BREAK_OPS["outer_twice"].callable_for(decorate)(torch.ones(3))
    assert calls == ["outer_twice", "inner_shrink", "inner_shrink"]


def test_ops_run_with_the_inferred_meta_on_the_test_device(bcg_device: str) -> None:
    device = bcg_device
    failures = []
    for name, spec in sorted(ALL_OPS.items()):
        for metas in CANDIDATES[name][:2]:
            params = _first_params(spec, metas)
            inputs = [make_tensor(m, 3, device, True) for m in metas]
            try:
                out = call(spec.callable_for(lambda f: f), inputs, params)
                if spec.outputs and meta_of(out) != spec.infer(metas, params):
                    failures.append(f"{name}{metas}: {meta_of(out)}")
            except Exception as error:  # collect every failing op at once
                failures.append(f"{name}{metas} {params}: {error}")
    assert not failures, "\n".join(failures)


def _first_params(spec: OpSpec, metas: tuple[TensorMeta, ...]) -> dict[str, Any]:
    """A deterministic valid draw, without hypothesis's interactive ``example()``."""

    @settings(max_examples=1, database=None, derandomize=True)
    @given(spec.params(metas))
    def grab(params: dict[str, Any]) -> None:
        found.append(params)

    found: list[dict[str, Any]] = []
    grab()
    return found[0]


@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore:The CUDA Graph is empty")  # pure view ops launch nothing
@pytest.mark.parametrize("name", sorted(n for n, s in CAPTURABLE.items() if not s.rng))
def test_capturable_op_replays_under_a_torch_cuda_graph_like_eager(
    name: str, bcg_device: str
) -> None:
    spec = CAPTURABLE[name]
    for metas in CANDIDATES[name][:3]:
        params = _first_params(spec, metas)
        inputs = [make_tensor(m, 5, bcg_device, True) for m in metas]
        eager_inputs, static = clones(inputs), clones(inputs)
        expected = spec.run(*eager_inputs, **params)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the capture, as torch recommends
            spec.run(*clones(inputs), **params)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = spec.run(*static, **params)
        for dst, src in zip(static, inputs):
            dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        for got, want in [(out, expected), *zip(static, eager_inputs)]:
            if spec.deterministic:
                assert same_values(got, want), (metas, params)
            else:
                torch.testing.assert_close(
                    got, want, rtol=spec.rtol, atol=spec.atol, equal_nan=True, check_dtype=True
                )
