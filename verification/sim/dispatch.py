"""The dispatch mode that turns every aten call into simulated CUDA work.

Outside capture an op executes and its fresh outputs are moved into blocks of the default
pool. On a capturing stream it is recorded instead: views (metadata only) execute,
writes are deferred to replay, fresh outputs get poisoned blocks of the capture's pool,
and capture-illegal ops (host syncs, data-dependent shapes) raise and invalidate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from verification.sim import cuda_errors, state
from verification.sim.allocator import Block
from verification.sim.recording import Step, flatten_call, ref_to
from verification.sim.streams import current_stream

# Ops with an output shape or value the host needs now; integer indexing is fine on CUDA,
# so index ops are only illegal with a boolean mask (checked per call).
_ILLEGAL_TAGS = (torch.Tag.data_dependent_output, torch.Tag.dynamic_output_shape)
_MASK_CHECKED = {
    torch.ops.aten.index.Tensor,
    torch.ops.aten.index_put_.default,
    torch.ops.aten.index_put.default,
    torch.ops.aten._index_put_impl_.default,
}
# Allocation-only ops: their output holds whatever the memory held, so nothing to replay.
_NO_DATA = {
    torch.ops.aten.empty.memory_format,
    torch.ops.aten.empty_strided.default,
    torch.ops.aten.empty_like.default,
    torch.ops.aten.new_empty.default,
    torch.ops.aten.new_empty_strided.default,
    torch.ops.aten.empty_permuted.default,
}


@dataclass(frozen=True)
class OpInfo:
    """How the simulator treats one aten overload, derived once from its schema and tags."""

    metadata_only: bool  # views and in-place view ops: always execute
    illegal_in_capture: bool
    mask_checked: bool
    writes_no_data: bool
    # Per schema return: index of the argument it aliases, or None for a fresh tensor.
    return_aliases: tuple[int | None, ...]
    list_returns: tuple[bool, ...]

    @property
    def has_fresh(self) -> bool:
        return any(a is None for a in self.return_aliases)


_infos: dict[Any, OpInfo] = {}


def op_info(func: Any) -> OpInfo:
    info = _infos.get(func)
    if info is not None:
        return info
    schema = func._schema
    sets = {
        frozenset(a.alias_info.before_set): i
        for i, a in enumerate(schema.arguments)
        if a.alias_info is not None
    }
    aliases = tuple(
        None if r.alias_info is None else sets.get(frozenset(r.alias_info.before_set))
        for r in schema.returns
    )
    writes = any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
    is_view = not writes and any(r.alias_info is not None for r in schema.returns)
    info = OpInfo(
        metadata_only=is_view or torch.Tag.inplace_view in func.tags,
        illegal_in_capture=func not in _MASK_CHECKED and any(t in func.tags for t in _ILLEGAL_TAGS),
        mask_checked=func in _MASK_CHECKED,
        writes_no_data=func in _NO_DATA,
        return_aliases=aliases,
        list_returns=tuple(isinstance(r.type, torch._C.ListType) for r in schema.returns),
    )
    _infos[func] = info
    return info


def _arg(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], index: int) -> Any:
    spec = func._schema.arguments[index]
    if not spec.kwarg_only and index < len(args):
        return args[index]
    return kwargs.get(spec.name)


def _block_tensor(block: Block, like: torch.Tensor) -> torch.Tensor:
    return torch.empty(0, dtype=like.dtype).set_(
        block.storage, like.storage_offset(), like.shape, like.stride()
    )


def _rehome(t: Any, session: Any, copy: bool) -> Any:
    """Moves a fresh eager output into a default-pool block (same layout, same bytes)."""
    if type(t) is not torch.Tensor or t.device.type != "cpu" or t.layout != torch.strided:
        return t
    storage = t.untyped_storage()
    nbytes = storage.nbytes()
    if nbytes == 0 or session.allocator.find(storage.data_ptr()) is not None:
        return t
    block = session.allocator.allocate(session.allocator.default_pool, nbytes)
    if copy:
        dst = torch.empty(0, dtype=torch.uint8).set_(block.storage, 0, (nbytes,), (1,))
        dst.copy_(torch.empty(0, dtype=torch.uint8).set_(storage, 0, (nbytes,), (1,)))
    out = _block_tensor(block, t)
    out.requires_grad_(t.requires_grad)
    return out


def _map_returns(info: OpInfo, result: Any, fn: Any) -> Any:
    """Applies ``fn(value, index)`` to each fresh return of ``result``."""
    n = len(info.return_aliases)
    values = [result] if n == 1 else list(result)
    for i, alias in enumerate(info.return_aliases):
        if alias is None:
            values[i] = [fn(v, i) for v in values[i]] if info.list_returns[i] else fn(values[i], i)
    return values[0] if n == 1 else tuple(values)


def _to_meta(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    if isinstance(x, torch.device):
        return torch.device("meta")
    return x


# Meta results by (op, input layouts, other arguments): capturing the same program again
# must not pay for torch's Python meta kernels on every op.
_meta_cache: dict[Any, Any] = {}
_META_CACHE_LIMIT = 8192


def _layout_key(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    leaves, spec = flatten_call(args, kwargs)
    key = tuple(
        (tuple(x.shape), x.stride(), x.dtype) if isinstance(x, torch.Tensor) else x for x in leaves
    )
    return (func, key, spec)


def _output_metadata(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The op's outputs computed on meta tensors (on real inputs if it has no meta kernel)."""
    try:
        key = _layout_key(func, args, kwargs)
        cached = _meta_cache.get(key)
    except TypeError:  # an unhashable argument: no caching for this call
        key, cached = None, None
    if cached is not None:
        return cached
    meta_kwargs = {k: ("meta" if k == "device" and v is not None else v) for k, v in kwargs.items()}
    try:
        result = func(*tree_map(_to_meta, args), **tree_map(_to_meta, meta_kwargs))
    except (NotImplementedError, RuntimeError):
        return func(*args, **kwargs)
    if key is not None:
        if len(_meta_cache) >= _META_CACHE_LIMIT:
            _meta_cache.clear()
        _meta_cache[key] = result
    return result


def _is_mask(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.dtype in (torch.bool, torch.uint8)


def _fail(capture: Any) -> None:
    capture.invalidate()
    raise RuntimeError(cuda_errors.NOT_PERMITTED)


def run_eager(func: Any, info: OpInfo, args: tuple, kwargs: dict, session: Any) -> Any:
    result = func(*args, **kwargs)
    if info.metadata_only or not info.has_fresh:
        return result
    copy = not info.writes_no_data
    return _map_returns(info, result, lambda t, _: _rehome(t, session, copy))


def run_captured(
    func: Any, info: OpInfo, args: tuple, kwargs: dict, stream: Any, session: Any
) -> Any:
    capture = stream.capture
    if info.illegal_in_capture:
        _fail(capture)
    if info.mask_checked:
        indices = _arg(func, args, kwargs, 1)
        if any(_is_mask(i) for i in indices or ()):
            _fail(capture)
    if info.metadata_only:
        return func(*args, **kwargs)
    allocator = session.allocator
    n = len(info.return_aliases)

    def fresh_block(meta: Any, _: int) -> Any:
        if not isinstance(meta, torch.Tensor):
            return meta
        block = allocator.allocate(capture.pool, meta.untyped_storage().nbytes())
        return _block_tensor(block, meta)

    values: list[Any] = [None] * n
    if info.has_fresh:
        fresh = _map_returns(info, _output_metadata(func, args, kwargs), fresh_block)
        values = [fresh] if n == 1 else list(fresh)
    refs: list[Any] = [None] * n
    for i, alias in enumerate(info.return_aliases):
        if alias is not None:
            values[i] = _arg(func, args, kwargs, alias)
        elif info.list_returns[i]:
            refs[i] = [ref_to(t, allocator) for t in values[i]]
        elif isinstance(values[i], torch.Tensor):
            refs[i] = ref_to(values[i], allocator)
    if not info.writes_no_data:
        capture.add_step(stream, Step(func, args, kwargs, refs, allocator))
    if n == 0:
        return None
    return values[0] if n == 1 else tuple(values)


class SimMode(TorchDispatchMode):
    """Routes each aten call to eager execution or capture, by the thread's current stream."""

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        session = state.session
        if session is None:
            return func(*args, **kwargs)
        info = op_info(func)
        stream = current_stream()
        if stream.capture is None:
            return run_eager(func, info, args, kwargs, session)
        return run_captured(func, info, args, kwargs, stream, session)
