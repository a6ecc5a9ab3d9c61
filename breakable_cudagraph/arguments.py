"""Holds a break's arguments and results for replay without keeping capture intermediates alive.

``hold_for_replay(tree, pool_memory)`` copies ``tree``, replacing every tensor whose storage lies
in the capture's memory pool by a non-owning alias (same address, dtype, shape, strides; it keeps
nothing alive and frees nothing) and keeping every other tensor by strong reference, which is what
stops its memory being freed and reused under the eager step. Pool memory stays reserved while the
capture's graphs live, and the capture owns both the graphs and the aliases, so an alias is never
read after its memory could be handed to anyone else.

An alias is a function of what it is made of (storage address and size, device, dtype, offset,
shape, strides), so one is made per such description and given to every break that passes a
tensor of that description while the capture is open: the same tensor passed twice, and the
same intermediate of the next layer, which the allocator puts where the last one was. Each
alias is a view of one non-owning tensor over its whole storage, made once per storage.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from typing import Any

import torch

from .trees import map_leaves, map_tensors, tensor_leaves

# Private torch API (used by torch's own cudagraph trees); without it every tensor is held
# strongly, which is still safe but keeps capture intermediates alive as long as the capture.
_construct_storage = getattr(torch._C, "_construct_storage_from_data_pointer", None)


class _PoolAnswers:
    """What is known of one memory pool: the address ranges of its segments (from
    ``torch.cuda.memory_snapshot()``, refreshed on a miss: a pool only grows while it is in
    use), the addresses found outside it, and the aliases made over its storages.

    Every capture into the pool that holds a graph there shares one (:func:`_shared_answers`):
    a held graph keeps the pool's segments where they are, so an answer stays true while any
    sharer lives. An address outside the pool may later lie in a segment the pool gets after
    that memory was released; it is then held strongly, which is safe and costs only memory.
    """

    __slots__ = ("__weakref__", "aliases", "executables", "outside", "pool", "ranges", "storages")

    def __init__(self, pool: tuple[Any, ...]) -> None:
        self.pool = pool
        self.ranges: list[tuple[int, int]] = []
        self.outside: set[int] = set()
        # alias key (see _alias_key) -> the alias made for it; only pool memory has one.
        self.aliases: dict[tuple[Any, ...], torch.Tensor] = {}
        # (address, size, device, dtype) of a pool storage -> a non-owning tensor over all of it
        self.storages: dict[tuple[Any, ...], torch.Tensor] = {}
        # segment position -> the executables shared there (see executables.share)
        self.executables: dict[int, list[Any]] = {}

    def refresh(self) -> None:
        self.ranges = [
            (segment["address"], segment["address"] + segment["total_size"])
            # The whole snapshot, not torch's ``mempool_id=`` form: asked for the pool alone
            # during a capture, torch 2.11 crashed the process on the H200 (segfaults in two
            # suite workers).
            for segment in torch.cuda.memory_snapshot()
            if tuple(segment.get("segment_pool_id") or ()) == self.pool
        ]

    def cached(self, address: int) -> bool:
        for start, end in self.ranges:
            if start <= address < end:
                return True
        return False


# One record per pool for the captures that hold graphs there (see PoolMemory.attach); an
# entry goes when its last sharer lets it go.
_SHARED: weakref.WeakValueDictionary[tuple[Any, ...], _PoolAnswers] = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


def _shared_answers(pool: tuple[Any, ...]) -> _PoolAnswers:
    with _SHARED_LOCK:
        answers = _SHARED.get(pool)
        if answers is None:
            answers = _SHARED[pool] = _PoolAnswers(pool)
        return answers


class PoolMemory:
    """Answers whether an address lies in the segments the allocator gave to one memory pool.

    Ranges come from ``torch.cuda.memory_snapshot()``; they are cached and refreshed once on a
    miss, which is enough because a pool only grows while it is in use. Addresses found
    outside the pool are remembered too: their tensors are then held strongly for the
    capture's life, so that memory cannot be freed and handed to the pool meanwhile, and a
    break on weights or caches does not pay a snapshot every time.

    What is known of the pool (ranges, addresses outside it, aliases) is the capture's own
    until ``attach()``, called once its capture holds a graph in the pool; from then until
    ``detach()`` (the capture reset or failed) it is shared with every other capture into the
    same pool, so that each capture of an engine's per-size loop (one capture per batch size,
    one pool) finds the weights, caches and pool segments the earlier sizes looked up.

    ``held`` maps ``id(tensor)`` to ``(tensor, tensor.data_ptr())`` for each plain tensor
    argument found outside the pool and so held by strong reference: a later break given the
    same tensor, still at the same address, holds it again without a lookup (most breaks take
    the same buffers every time). The entry keeps the tensor alive, so its id is not reused
    meanwhile, and holding it again changes no lifetime; a tensor whose storage was swapped
    since has moved and is looked up afresh. ``aliases`` maps each alias key (:func:`_alias_key`)
    to the alias made for it, for pool memory only: a key found there needs no look-up. A
    capture empties ``held`` when it closes (``capture_closed``), unless the record serves a
    whole ``sweep``: then every capture of the sweep keeps what it held until the sweep's owner
    calls ``forget_held``, so the breaks of each later size find the weights and caches the
    first size already held without a look-up.
    """

    def __init__(self, pool: Any, *, sweep: bool = False) -> None:
        self._pool = tuple(pool)
        self._sweep = sweep
        self._answers = _PoolAnswers(self._pool)
        self.held: dict[int, tuple[torch.Tensor, int]] = {}
        self.aliases = self._answers.aliases

    def attach(self) -> None:
        """Share what is known of the pool with the other captures holding graphs in it; call
        once this record's capture holds one (which keeps the pool's segments in place)."""
        # What the record knew on its own is only a cache, which the shared one replaces.
        self._answers = _shared_answers(self._pool)
        self.aliases = self._answers.aliases

    def detach(self) -> None:
        """This record's capture holds no graph any more: forget what it held and stop
        sharing (the pool may be released, and its answers with it)."""
        self.forget_held()
        self._answers = _PoolAnswers(self._pool)
        self.aliases = self._answers.aliases

    def forget_held(self) -> None:
        self.held = {}

    def executables(self) -> dict[int, list[Any]]:
        """The executables the pool's sharing captures placed, by segment position."""
        return self._answers.executables

    def capture_closed(self) -> None:
        """A capture using this record closed: what it held is forgotten, unless a sweep
        shares the record (its captures keep their arguments alive until the sweep ends)."""
        if not self._sweep:
            self.forget_held()

    def alias(self, tensor: torch.Tensor, key: tuple[Any, ...]) -> torch.Tensor:
        """The alias of pool tensor ``tensor`` (whose :func:`_alias_key` is ``key``): a view of
        one non-owning tensor over its whole storage, made once per storage and dtype.

        The tensors of one storage (q, k and v split from one projection) and the storage a
        later layer or size finds at the same place share that tensor, and a view of it costs
        a third less than a tensor of its own; being views, they share one version counter.
        A tensor carrying Python attributes (``logits.vocab_mask = ...``) gets an alias of its
        own with those attributes, held as arguments are: another tensor at the same place
        need not carry them."""
        attributes = tensor.__dict__
        alias = None if attributes else self.aliases.get(key)
        if alias is None:
            storage, (offset, shape, strides) = key[:4], key[4:]
            storages = self._answers.storages
            whole = storages.get(storage)
            if whole is None:
                whole = storages[storage] = whole_storage_alias(tensor)
            alias = whole.as_strided(shape, strides, offset)
            if attributes:
                alias.__dict__.update(hold_for_replay(dict(attributes), self))
            else:
                self.aliases[key] = alias
        return alias

    def addresses_in_pool(self, addresses: Iterable[int]) -> set[int]:
        """The subset of ``addresses`` that lie in the pool (one snapshot at most per call)."""
        answers = self._answers
        wanted = set(addresses)
        if answers.outside:
            wanted -= answers.outside
        found = {address for address in wanted if answers.cached(address)}
        if len(found) != len(wanted):
            answers.refresh()
            found = {address for address in wanted if answers.cached(address)}
            answers.outside |= wanted - found
        return found


def _alias_key(tensor: torch.Tensor) -> tuple[Any, ...] | None:
    """What a non-owning alias of ``tensor`` is made of, its storage's address first, if one
    can stand in for it; else None."""
    # Only plain strided tensors can be rebuilt exactly from (storage, offset, size, stride);
    # anything else (subclasses, sparse, conj/neg views, empty storage) is held strongly.
    if (
        _construct_storage is None
        or type(tensor) is not torch.Tensor
        or tensor.layout is not torch.strided
        or tensor.is_conj()
        or tensor.is_neg()
    ):
        return None
    storage = tensor.untyped_storage()
    nbytes = storage.nbytes()
    if not nbytes:
        return None
    return (
        storage.data_ptr(),
        nbytes,
        tensor.device,
        tensor.dtype,
        tensor.storage_offset(),
        tensor.shape,
        tensor.stride(),
    )


def whole_storage_alias(tensor: torch.Tensor) -> torch.Tensor:
    """A 1-D tensor of ``tensor``'s dtype over all of its storage's memory, which neither owns
    nor keeps alive that memory."""
    storage = tensor.untyped_storage()
    nbytes = storage.nbytes()
    borrowed = _construct_storage(storage.data_ptr(), tensor.device, nbytes)
    # new_empty rather than torch.empty(..., dtype=, device=): same tensor, a third of the
    # argument parsing.
    return tensor.new_empty(0).set_(borrowed, 0, (nbytes // tensor.itemsize,), (1,))


def non_owning_alias(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor viewing ``tensor``'s memory that neither owns nor keeps alive that memory."""
    whole = whole_storage_alias(tensor)
    return whole.as_strided(tensor.size(), tensor.stride(), tensor.storage_offset())


class CallerObject:
    """A container of the caller's, found holding pool tensors among a break's arguments.

    The caller may still hold it and update it in place between replays (a runner's attention
    metadata: its lengths rebound, its tensors made inside the capture), so the break is given
    the caller's own object for as long as it lives. It is referenced weakly, so that holding
    it keeps none of its tensors alive; once the caller lets it go, ``fallback`` (a copy made
    at capture, its pool tensors swapped for non-owning aliases) stands in for it.
    """

    __slots__ = ("fallback", "ref")

    def __init__(self, original: Any, fallback: Any) -> None:
        self.ref = weakref.ref(original)
        self.fallback = fallback

    def get(self) -> Any:
        original = self.ref()
        return resolve_caller_objects(self.fallback) if original is None else original


def resolve_caller_objects(tree: Any) -> Any:
    """``tree`` with each :class:`CallerObject` replaced by what it stands for now."""
    if type(tree) is CallerObject:
        return tree.get()
    return map_leaves(tree, resolve_caller_objects, lambda leaf: type(leaf) is CallerObject)


def hold_for_replay(tree: Any, pool_memory: PoolMemory) -> Any:
    """``tree`` with pool tensors replaced by non-owning aliases and the rest held as they are;
    a container holding pool tensors is copied to hold their aliases."""
    return _hold(tree, pool_memory, caller_objects=False)[0]


def _hold(tree: Any, pool_memory: PoolMemory, caller_objects: bool) -> tuple[Any, bool]:
    """:func:`hold_for_replay`, and whether a :class:`CallerObject` was made: with
    ``caller_objects``, a container that can be referenced weakly (a dataclass, any object of a
    Python class) stands as one instead of as its copy."""
    # Keyed by id: the tree keeps every leaf alive meanwhile, and each tensor is inspected
    # once (the walk is most of a break's capture cost).
    candidates: dict[int, tuple[Any, ...]] = {}
    for tensor in tensor_leaves(tree):
        if id(tensor) not in candidates:
            key = _alias_key(tensor)
            if key is not None:
                candidates[id(tensor)] = key
    if not candidates:
        return tree, False
    known = pool_memory.aliases  # pool memory stays the pool's: no need to look again
    in_pool = pool_memory.addresses_in_pool(k[0] for k in candidates.values() if k not in known)
    aliased = {i: k for i, k in candidates.items() if k in known or k[0] in in_pool}
    if not aliased:
        return tree, False  # nothing to replace: map_tensors would return tree itself

    def hold(tensor: torch.Tensor) -> torch.Tensor:
        key = aliased.get(id(tensor))
        return tensor if key is None else pool_memory.alias(tensor, key)

    if not caller_objects:
        return map_tensors(tree, hold), False
    made = False

    def copied(original: Any, copy: Any) -> Any:
        nonlocal made
        if type(original).__weakrefoffset__ == 0:  # a tuple, a plain list or dict
            return copy
        made = True
        return CallerObject(original, copy)

    return map_tensors(tree, hold, copied), made


# Leaves of a call's arguments that need no tree walk: most breaks take only these.
_FLAT_LEAVES = frozenset({torch.Tensor, type(None), bool, int, float, str})


def hold_call_arguments(
    args: tuple[Any, ...], kwargs: dict[str, Any], pool_memory: PoolMemory
) -> tuple[tuple[Any, ...], dict[str, Any], bool]:
    """A break's arguments held for replay (:func:`hold_for_replay`, the caller's containers as
    :class:`CallerObject` entries), and whether they hold any such entry, to be resolved at
    each call. Without the tree walk when no keyword arguments are given and every positional
    one is a plain tensor, a number, a string or None (each break pays this at capture)."""
    if kwargs or type(args) is not tuple:
        return _held_call(args, kwargs, pool_memory)
    held, known = pool_memory.held, pool_memory.aliases
    kept: list[Any] | None = None  # made once an argument is replaced
    unknown: list[tuple[int, tuple[Any, ...]]] = []  # aliasable, not yet known to the pool
    for index, arg in enumerate(args):
        kind = type(arg)
        if kind is torch.Tensor:
            entry = held.get(id(arg))
            if entry is not None and entry[1] == arg.data_ptr():
                continue  # held strongly before and not moved since: most breaks' buffers
            key = _alias_key(arg)
            if key is None:
                continue
            alias = known.get(key)
            if alias is None:
                unknown.append((index, key))
                continue
            if arg.__dict__:  # attributes travel on an alias of its own
                alias = pool_memory.alias(arg, key)
            if kept is None:
                kept = list(args)
            kept[index] = alias
        elif kind not in _FLAT_LEAVES:
            return _held_call(args, kwargs, pool_memory)
    if unknown:
        in_pool = pool_memory.addresses_in_pool(key[0] for _, key in unknown)
        for index, key in unknown:
            arg = args[index]
            if key[0] in in_pool:
                if kept is None:
                    kept = list(args)
                kept[index] = pool_memory.alias(arg, key)
            else:  # a plain tensor that could have been aliased: data_ptr() is safe on it
                held[id(arg)] = (arg, arg.data_ptr())
    return (args, kwargs, False) if kept is None else (tuple(kept), kwargs, False)


def _held_call(
    args: tuple[Any, ...], kwargs: dict[str, Any], pool_memory: PoolMemory
) -> tuple[tuple[Any, ...], dict[str, Any], bool]:
    (args, kwargs), made = _hold((args, kwargs), pool_memory, caller_objects=True)
    return args, kwargs, made
