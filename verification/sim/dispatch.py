"""The dispatch mode that turns every aten call into simulated CUDA work.

Host tensors' ops run natively, even during capture, as on CUDA. An op on device tensors
runs on host views of them (:mod:`bridge`): outside capture it executes and its fresh
outputs move into blocks of the default pool; on a capturing stream it is recorded instead:
views (metadata only) execute, writes are deferred to replay, fresh outputs get poisoned
blocks of the capture's pool, and capture-illegal ops (host syncs, data-dependent shapes)
raise and invalidate; once a capture is invalidated, every later launch into it raises.
Host-device copies follow :mod:`transfers`.
"""

from __future__ import annotations

import ctypes
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

from verification.sim import capture_rules, cuda_errors, state, transfers
from verification.sim.allocator import Block
from verification.sim.bridge import Bridge
from verification.sim.device_tensors import HOST, device_view, set_layout
from verification.sim.recording import (
    BlockRef,
    CallSpec,
    Step,
    flatten_call,
    ref_to,
    unflatten_call,
)
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
_RULED = {*capture_rules.SYNCS_WHEN, *capture_rules.LIBRARY}
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
    is_view: bool  # returns new tensors aliasing an input, writes nothing
    illegal_in_capture: bool
    mask_checked: bool
    writes_no_data: bool
    # Per schema return: index of the argument it aliases, or None for a fresh tensor.
    return_aliases: tuple[int | None, ...]
    list_returns: tuple[bool, ...]
    out_args: frozenset[int]  # indices of ``out=`` arguments
    random: bool  # draws from the device generator
    single_return: bool
    # Capture needs only the arguments' layouts (no rule reads their values, no ``out=``
    # resize, nothing executes), so it can skip host views: see ``_record_from_layouts``.
    recorded_from_layouts: bool
    has_fresh: bool  # some return is a fresh tensor


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
    metadata_only = is_view or torch.Tag.inplace_view in func.tags
    illegal = func not in _MASK_CHECKED and any(t in func.tags for t in _ILLEGAL_TAGS)
    out_args = frozenset(i for i, a in enumerate(schema.arguments) if a.is_out)
    info = OpInfo(
        metadata_only=metadata_only,
        is_view=is_view,
        illegal_in_capture=illegal,
        mask_checked=func in _MASK_CHECKED,
        writes_no_data=func in _NO_DATA,
        return_aliases=aliases,
        list_returns=tuple(isinstance(r.type, torch._C.ListType) for r in schema.returns),
        out_args=out_args,
        random=torch.Tag.nondeterministic_seeded in func.tags,
        single_return=len(aliases) == 1,
        has_fresh=any(a is None for a in aliases),
        recorded_from_layouts=not (
            metadata_only
            or illegal
            or out_args
            or func in _MASK_CHECKED
            or func in _RULED
            or func in capture_rules.SYNCS_WHEN
        ),
    )
    _infos[func] = info
    return info


def _arg(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], index: int) -> Any:
    spec = func._schema.arguments[index]
    if not spec.kwarg_only and index < len(args):
        return args[index]
    return kwargs.get(spec.name)


def _block_tensor(block: Block, like: torch.Tensor) -> torch.Tensor:
    return torch.empty(0, dtype=like.dtype, device="cpu").set_(
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
        # Both are plain host memory: one memmove, where byte views and copy_ take three
        # torch calls on every eager device op.
        ctypes.memmove(block.address, storage.data_ptr(), nbytes)
    out = _block_tensor(block, t)
    if t.requires_grad:  # a fresh tensor does not
        out.requires_grad_()
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


def _layout_key(func: Any, leaves: list[Any], spec: CallSpec) -> Any:
    """The cache key of a call flattened by ``flatten_call``, on host views or on device
    tensors alike: a tensor counts by layout and a device by ``to_host``'s answer."""
    key = tuple(
        (tuple(x.shape), x.stride(), x.dtype)
        if isinstance(x, torch.Tensor)
        else HOST
        if isinstance(x, torch.device) and x.type == "cuda"
        else x
        for x in leaves
    )
    return (func, key, spec)


def _output_metadata(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], flat: Any = None
) -> Any:
    """The op's outputs computed on meta tensors (on real inputs if it has no meta kernel).

    ``flat`` is ``flatten_call(args, kwargs)`` when the caller already has it.
    """
    try:
        key = _layout_key(func, *(flat if flat is not None else flatten_call(args, kwargs)))
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
    result = _as_a_kernel_lays_out(func, args, kwargs, result)
    if key is not None:
        if len(_meta_cache) >= _META_CACHE_LIMIT:
            _meta_cache.clear()
        _meta_cache[key] = result
    return result


def _shape_and_dtype(x: Any) -> Any:
    return (tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else None


def _as_a_kernel_lays_out(func: Any, args: tuple, kwargs: dict, meta: Any) -> Any:
    """``meta``, or the layout of the op's real outputs where its meta kernel disagrees.

    Some torch releases ship meta kernels that give another shape than the kernel itself
    (2.11's ``linalg_vector_norm`` of one element keeps the reduced dimension). A replay must
    produce what eager produces, so each new call layout's shapes and dtypes are checked once
    against a run of the op on copies of its inputs, with the generator's state put back;
    strides stay the meta kernel's, which follow CUDA's where CPU kernels may not.
    """
    try:
        copied_args, copied_kwargs = tree_map(_cloned, (args, kwargs))
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            real = func(*copied_args, **copied_kwargs)
    except Exception:  # inputs that a capture has not written yet may be invalid for the op
        return meta
    if tree_map(_shape_and_dtype, real) == tree_map(_shape_and_dtype, meta):
        return meta
    return tree_map(_to_meta, real)


def _cloned(x: Any) -> Any:
    return x.clone() if isinstance(x, torch.Tensor) else x


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


def _launches_nothing(values: list[Any]) -> bool:
    # CUDA launches no kernel for an op whose outputs are all empty: nothing is captured.
    tensors = [t for v in values for t in (v if isinstance(v, (list, tuple)) else (v,))]
    tensors = [t for t in tensors if isinstance(t, torch.Tensor)]
    return bool(tensors) and all(t.numel() == 0 for t in tensors)


def run_captured(
    func: Any,
    info: OpInfo,
    args: tuple,
    kwargs: dict,
    stream: Any,
    session: Any,
    flat: tuple[list[Any], CallSpec] | None = None,
) -> Any:
    capture = stream.capture
    if func in capture_rules.SYNCS_WHEN and capture_rules.host_copy(func, args, kwargs):
        raise RuntimeError(cuda_errors.HOST_COPY)
    if (info.illegal_in_capture or func in _RULED) and capture_rules.refused(
        func, info.illegal_in_capture, args, kwargs, session.warm_libraries
    ):
        if func in capture_rules.LIBRARY:
            capture.invalidate()
            raise RuntimeError(cuda_errors.CUSOLVER_IN_CAPTURE)
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
        nbytes = meta.untyped_storage().nbytes()
        if nbytes == 0:  # CUDA's allocator hands out no block for no bytes
            return torch.empty_strided(meta.shape, meta.stride(), dtype=meta.dtype, device=HOST)
        block = allocator.allocate(capture.pool, nbytes)
        return _block_tensor(block, meta)

    values: list[Any] = [None] * n
    if info.has_fresh:
        fresh = _map_returns(info, _output_metadata(func, args, kwargs, flat), fresh_block)
        values = [fresh] if n == 1 else list(fresh)
    refs: list[Any] = [None] * n
    for i, alias in enumerate(info.return_aliases):
        if alias is not None:
            values[i] = _arg(func, args, kwargs, alias)
        elif info.list_returns[i]:
            refs[i] = [ref_to(t, allocator) for t in values[i]]
        elif isinstance(values[i], torch.Tensor):
            refs[i] = ref_to(values[i], allocator)
    if not info.writes_no_data and not _launches_nothing(values):
        leaves, spec = flat if flat is not None else flatten_call(args, kwargs)
        recorded = [ref_to(x, allocator) if isinstance(x, torch.Tensor) else x for x in leaves]
        capture.add_step(stream, Step(func, recorded, spec, refs, info.single_return))
    if n == 0:
        return None
    return values[0] if n == 1 else tuple(values)


def _resize_outputs(func: Any, info: OpInfo, args: tuple, kwargs: dict, pool: Any) -> None:
    """Gives ``out=`` host views their result shape first, growing into a block of ``pool``.

    Host views cannot be reallocated by a kernel, and on CUDA an ``out=`` tensor is resized
    when the op is issued (also at capture), so the resize happens here, not in the kernel.
    """
    meta = _output_metadata(func, args, kwargs)
    metas = [meta] if len(info.return_aliases) == 1 else list(meta)
    for alias, shape_of in zip(info.return_aliases, metas):
        if alias not in info.out_args or not isinstance(shape_of, torch.Tensor):
            continue
        out = _arg(func, args, kwargs, alias)
        if isinstance(out, torch.Tensor) and out.shape != shape_of.shape:
            resize_host(out, shape_of.shape, pool, state.require().allocator)


def resize_host(t: torch.Tensor, shape: Any, pool: Any, allocator: Any) -> None:
    """``t.resize_(shape)`` for a host view: in place if its memory suffices, else a new block
    (of the capture's pool during a capture, which the H200 accepts: replay writes there).
    """
    numel = 1
    for d in shape:
        numel *= d
    needed = (t.storage_offset() + numel) * t.element_size()
    with torch._C._DisableTorchDispatch():
        if needed <= t.untyped_storage().nbytes():
            t.resize_(shape)
            return
        block = allocator.allocate(pool, numel * t.element_size())
        t.set_(block.storage, 0, shape, torch.empty(shape, device="meta").stride())


def _wants_device(x: Any) -> bool:
    return (isinstance(x, torch.Tensor) and x.is_cuda) or (
        isinstance(x, torch.device) and x.type == "cuda"
    )


def _check_same_device(func: Any, leaves: list[Any]) -> None:
    # CUDA kernels take host tensors only as 0-dim scalars (and indices, which they copy).
    if func in _MASK_CHECKED:
        return
    for x in leaves:
        if isinstance(x, torch.Tensor) and not x.is_cuda and x.dim() > 0:
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two "
                "devices, cuda:0 and cpu!"
            )


def _bake(x: Any) -> Any:
    # A 0-dim host operand is read when the op is issued: at capture, not at replay.
    return x.clone() if isinstance(x, torch.Tensor) and not x.is_cuda and x.dim() == 0 else x


def run_on_device(
    func: Any,
    args: tuple,
    kwargs: dict,
    session: Any,
    checked: bool = True,
    flat: tuple[list[Any], Any] | None = None,
) -> Any:
    """Runs ``func`` (some argument on the device) on host views, eagerly or into the capture.

    ``flat`` is ``flatten_call(args, kwargs)`` when the caller already has it: every device
    op comes through here, so flattening twice is a measurable share of its cost.
    """
    info = op_info(func)
    stream = current_stream()
    capture = stream.capture
    leaves, spec = flat if flat is not None else flatten_call(args, kwargs)
    if checked and kwargs.get("device") is None:  # factories only read a host tensor's shape
        _check_same_device(func, leaves)
    if capture is not None:
        if (
            capture.error == cuda_errors.INVALIDATED
            and capture.refuses_launches
            and not (info.metadata_only or info.writes_no_data)
        ):
            # CUDA refuses every launch into a capture it has invalidated.
            raise RuntimeError(cuda_errors.INVALIDATED)
        if checked:
            leaves = [_bake(x) for x in leaves]
        if session.strict_warmup:
            key = capture_rules.kernel_key(func, leaves)
            if key is not None and key not in session.warm_kernels:
                capture.invalidate()  # the op is issued; the H200 fails capture_end
        if info.recorded_from_layouts:
            result = _record_from_layouts(func, info, args, kwargs, leaves, spec, stream, session)
            if result is not _NEEDS_HOST_VIEWS:
                return result
    bridge = Bridge(session.allocator)
    host_leaves = [bridge.to_host(x) for x in leaves]
    host_args, host_kwargs = unflatten_call(host_leaves, spec)
    pool = session.allocator.default_pool if capture is None else capture.pool
    if info.out_args:
        _resize_outputs(func, info, host_args, host_kwargs, pool)
    if capture is None:
        if info.illegal_in_capture:
            session.check_unsafe_call()  # the host waits for the device: a sync
        if func in _RULED:
            capture_rules.ran_eagerly(func, session.warm_libraries)
        if session.strict_warmup and (key := capture_rules.kernel_key(func, leaves)):
            session.warm_kernels.add(key)
        if info.random:
            if session.rng.capturing:
                raise RuntimeError(cuda_errors.RNG_LEFT_CAPTURING)
            with session.rng.active():
                result = run_eager(func, info, host_args, host_kwargs, session)
        else:
            result = run_eager(func, info, host_args, host_kwargs, session)
        if session.races is not None and not (info.metadata_only or info.writes_no_data):
            session.races.op(func, host_args, host_kwargs, result, stream, "eager")
            if info.illegal_in_capture:
                session.races.host_waits_for_stream(stream)
    else:
        flat = (host_leaves, spec)
        result = run_captured(func, info, host_args, host_kwargs, stream, session, flat)
    return _device_results(
        func, info, result, (args, kwargs), (host_args, host_kwargs), bridge, pool
    )


_NEEDS_HOST_VIEWS = object()


def _device_ref(t: torch.Tensor, allocator: Any) -> BlockRef | None:
    """``ref_to`` of ``t``'s host view, read off the device tensor; None where that would be
    a ``HeldRef`` (which must hold the host view itself)."""
    if t.layout != torch.strided:
        return None
    base = t.untyped_storage().data_ptr()
    block = allocator.find(base)
    if block is None:
        return None
    size = t.element_size()
    byte_offset = base - block.address + t.storage_offset() * size
    if byte_offset % size:
        return None
    return BlockRef(block, t.dtype, tuple(t.shape), t.stride(), byte_offset // size)


def _record_from_layouts(
    func: Any,
    info: OpInfo,
    args: tuple,
    kwargs: dict,
    leaves: list[Any],
    spec: CallSpec,
    stream: Any,
    session: Any,
) -> Any:
    """``run_captured`` plus ``_device_results`` for an op whose capture reads only layouts.

    Such an op is recorded, not run, so its host views would serve only to name memory and
    look up output layouts; both come straight from the device tensors here, which saves
    most of a captured op's cost. Gives ``_NEEDS_HOST_VIEWS`` (having changed nothing) when
    the output layouts are not cached yet or an argument is not on a simulator block.
    """
    try:
        metas = _meta_cache.get(_layout_key(func, leaves, spec))
    except TypeError:
        return _NEEDS_HOST_VIEWS
    if metas is None or any(
        isinstance(m, torch.Tensor) and m.untyped_storage().nbytes() == 0
        for m in tree_leaves(metas)
    ):
        return _NEEDS_HOST_VIEWS  # an empty output has no block to name
    allocator = session.allocator
    recorded: list[Any] = []
    for x in leaves:
        if isinstance(x, torch.Tensor):
            if x.is_cuda:
                x = _device_ref(x, allocator)
                if x is None:
                    return _NEEDS_HOST_VIEWS
            else:
                x = ref_to(x, allocator)
        elif isinstance(x, torch.device) and x.type == "cuda":
            x = HOST
        recorded.append(x)
    pool = stream.capture.pool

    def fresh(meta: Any) -> tuple[Any, Any]:
        if not isinstance(meta, torch.Tensor):
            return meta, None
        block = allocator.allocate(pool, meta.untyped_storage().nbytes())
        shape, stride, offset = meta.shape, meta.stride(), meta.storage_offset()
        out = device_view(block.device_storage, meta.dtype, shape, stride, offset)
        return out, BlockRef(block, meta.dtype, tuple(shape), stride, offset)

    n = len(info.return_aliases)
    metas = [metas] if n == 1 else list(metas)
    values: list[Any] = [None] * n
    refs: list[Any] = [None] * n
    for i, alias in enumerate(info.return_aliases):
        if alias is not None:
            values[i] = _arg(func, args, kwargs, alias)
        elif info.list_returns[i]:
            pairs = [fresh(m) for m in metas[i]]
            values[i] = [v for v, _ in pairs]
            refs[i] = [r for _, r in pairs]
        else:
            values[i], refs[i] = fresh(metas[i])
    if not info.writes_no_data and not _launches_nothing(values):
        stream.capture.add_step(stream, Step(func, recorded, spec, refs, info.single_return))
    if n == 0:
        return None
    return values[0] if n == 1 else tuple(values)


def _device_results(
    func: Any, info: OpInfo, result: Any, call: tuple, host_call: tuple, bridge: Bridge, pool: Any
) -> Any:
    n = len(info.return_aliases)
    if n == 0:
        return result
    values = [result] if n == 1 else list(result)
    for i, alias in enumerate(info.return_aliases):
        if alias is None or info.is_view:
            if info.list_returns[i]:
                values[i] = [bridge.to_device(v, pool) for v in values[i]]
            else:
                values[i] = bridge.to_device(values[i], pool)
            continue
        original = _arg(func, *call, alias)
        host = _arg(func, *host_call, alias)
        pairs = zip(original, host) if isinstance(original, (list, tuple)) else [(original, host)]
        for o, h in pairs:
            if isinstance(o, torch.Tensor) and o.is_cuda:
                bridge.write_back(o, h, pool)
        values[i] = original
    return values[0] if n == 1 else tuple(values)


def _run_on_host(func: Any, args: tuple, kwargs: dict, session: Any) -> Any:
    if kwargs.get("pin_memory"):
        kwargs = {**kwargs, "pin_memory": False}
        return session.pinned.register(func(*args, **kwargs))
    return func(*args, **kwargs)


def _record(session: Any) -> Any:
    return lambda func, args: run_on_device(func, args, {}, session, checked=False)


def _copy(func: Any, args: tuple, kwargs: dict, session: Any) -> Any:
    dst, src = args[0], args[1]
    if not isinstance(src, torch.Tensor) or dst.is_cuda == src.is_cuda:
        return NotImplemented
    non_blocking = bool(args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
    capture = current_stream().capture
    return transfers.copy(dst, src, non_blocking, session, capture, _record(session))


def _to_copy(func: Any, args: tuple, kwargs: dict, session: Any) -> Any:
    target = kwargs.get("device")
    if target is None or (target.type == "cuda") == args[0].is_cuda:
        return NotImplemented
    capture = current_stream().capture
    return transfers.to_copy(args[0], kwargs, session, capture, _record(session))


def _is_pinned(func: Any, args: tuple, kwargs: dict, session: Any) -> Any:
    return session.pinned.holds(args[0])


def _pin_memory(func: Any, args: tuple, kwargs: dict, session: Any) -> Any:
    if args[0].is_cuda:
        raise RuntimeError(
            "cannot pin 'torch.cuda.FloatTensor' only dense CPU tensors can be pinned"
        )
    return session.pinned.register(args[0].clone())


def _set(func: Any, args: tuple, kwargs: dict, session: Any) -> Any:
    # Every overload ends in set_(storage, offset, size, stride), which only touches
    # metadata; the other overloads reach it through the dispatcher, so call it directly.
    t = args[0]
    if not t.is_cuda:
        return NotImplemented
    if func is torch.ops.aten.set_.source_Tensor:
        source = args[1]
        call = (source.untyped_storage(), source.storage_offset(), source.shape, source.stride())
    elif func is torch.ops.aten.set_.source_Storage:
        call = (args[1], 0, (args[1].nbytes() // t.element_size(),), (1,))
    else:
        storage, offset, size = args[1], args[2], args[3]
        stride = args[4] if len(args) > 4 else kwargs.get("stride", ())
        if not stride:  # torch's default: contiguous
            stride = torch.empty(size, device="meta").stride()
        call = (storage, offset, size, stride)
    set_layout(t, *call)
    return t


def _resize(func: Any, args: tuple, kwargs: dict, session: Any) -> Any:
    t = args[0]
    if not t.is_cuda:
        return NotImplemented
    capture = current_stream().capture
    pool = session.allocator.default_pool if capture is None else capture.pool
    bridge = Bridge(session.allocator)
    host = bridge.host_view(t)
    resize_host(host, tuple(args[1]), pool, session.allocator)
    bridge.write_back(t, host, pool)
    return t


def _softmax_to_float(func: Any, args: tuple, kwargs: dict, session: Any) -> Any:
    # softmax(half, dtype=float32) is one CUDA kernel; CPU torch has no such kernel, so
    # convert first (what the CPU's log_softmax does, and the same values).
    x, dim, half_to_float = args
    if not (half_to_float and x.is_cuda):
        return NotImplemented
    as_float = _dispatch(torch.ops.aten._to_copy.default, (x,), {"dtype": torch.float32})
    return _dispatch(func, (as_float, dim, False), {})


# Ops whose device semantics differ from "compute on host views"; a handler may return
# NotImplemented to fall back to the general path.
_SPECIAL = {
    torch.ops.aten._softmax.default: _softmax_to_float,
    torch.ops.aten.copy_.default: _copy,
    torch.ops.aten._to_copy.default: _to_copy,
    torch.ops.aten.is_pinned.default: _is_pinned,
    torch.ops.aten._pin_memory.default: _pin_memory,
    torch.ops.aten.set_.source_Storage: _set,
    torch.ops.aten.set_.source_Storage_storage_offset: _set,
    torch.ops.aten.set_.source_Tensor: _set,
    torch.ops.aten.resize_.default: _resize,
}


def _dispatch(func: Any, args: tuple, kwargs: Any) -> Any:
    kwargs = kwargs or {}
    session = state.session
    if session is None:
        return func(*args, **kwargs)
    handler = _SPECIAL.get(func)
    if handler is not None:
        result = handler(func, args, kwargs, session)
        if result is not NotImplemented:
            return result
    flat = flatten_call(args, kwargs)
    for x in flat[0]:
        if _wants_device(x):
            break
    else:
        return _run_on_host(func, args, kwargs, session)
    target = kwargs.get("device")
    if isinstance(target, torch.device) and target.type == "cpu":
        # A host factory shaped like a device tensor (zeros_like(x, device="cpu")).
        bridge = Bridge(session.allocator)
        return func(*[bridge.to_host(a) for a in args], **kwargs)
    return run_on_device(func, args, kwargs, session, flat=flat)


# Ops that torch's C++ calls for device tensors with the dispatch mode switched off: building
# a tensor from Python data (``new_tensor``, an index given as a list or a bool list) makes
# it on the host, then moves it with the mode excluded. CPU torch has no CUDA kernels for
# them, so they are registered for the CUDA key while the simulator is open.
_BELOW_THE_MODE = {
    "empty_strided": torch.ops.aten.empty_strided.default,
    "empty.memory_format": torch.ops.aten.empty.memory_format,
    "copy_": torch.ops.aten.copy_.default,
}


def _below_the_mode(func: Any) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        if state.session is None:
            raise NotImplementedError(f"{func} on a CUDA tensor needs the CUDA simulator open")
        return _dispatch(func, args, kwargs)

    return kernel


def register_device_kernels() -> torch.library.Library:
    """Registers the simulator's CUDA kernels for ``_BELOW_THE_MODE``; ``_destroy()`` of the
    library returned unregisters them (a CUDA build gets its own kernels back)."""
    library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        # A CUDA build has kernels there already, and warns that they are overridden.
        warnings.simplefilter("ignore")
        for name, func in _BELOW_THE_MODE.items():
            library.impl(name, _below_the_mode(func), "CUDA")
    return library


# Dynamo must not trace into the simulator. torch's default wrapper for a mode's
# __torch_dispatch__ ensures that on every call, at a few µs per op plus an import of
# torch._dynamo (seconds) on the first one; SimMode keeps that wrapper only for calls made
# while a dynamo frame callback is set, the only time it does anything.
_dispatch_without_dynamo = torch._disable_dynamo(_dispatch, recursive=True)
_eval_frame_callback = torch._C._dynamo.eval_frame.get_eval_frame_callback


class SimMode(TorchDispatchMode):
    """Runs host work natively and device work on host views, eagerly or into a capture."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # False stops torch wrapping __torch_dispatch__; the method skips dynamo itself.
        return False

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple = (), kwargs: Any = None
    ) -> Any:
        if _eval_frame_callback() is not None:
            return _dispatch_without_dynamo(func, args, kwargs)
        return _dispatch(func, args, kwargs)
