"""Runs a program two ways: eagerly (the reference) and captured by a target then replayed.

Every break call, in either mode, goes through a :class:`BreakLog` wrapper applied before
the target's decorator, so the oracle can see which breaks ran, in what order and on which
buffers. :class:`CapturedProgram` allocates static inputs, warms up eagerly and captures
once, all from a side stream of its own, and replays on demand. An engine-shaped program's
host values are made for each eager run, and for the capture once, then rewritten in place
before every replay, as a runner does; steps sharing a function slot call one callable.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import torch
from torch.utils._pytree import tree_flatten

from verification import breadcrumbs, causes
from verification.causes import forwarder
from verification.ops.ambient import ambient_context, ambient_seen, seen_difference, tagged
from verification.ops.bindings import bound_as
from verification.ops.host import HOST_SOURCE, host_argument
from verification.ops.spec import Decorate, OpSpec
from verification.programs import Program, Step, call_way, produces_value
from verification.sim import POISON_INT16
from verification.targets import Target


class TensorLayout(NamedTuple):
    """How a break was handed one tensor: what it reads, and how (its dtype, shape, strides),
    and where (its address). A replay must hand each break what the capture handed it."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    address: int

    def __str__(self) -> str:
        dtype = str(self.dtype).replace("torch.", "")
        return f"{dtype} {self.shape} strides {self.strides} at {self.address:#x}"


# A break call as the log keeps it: its step, and the layout of each tensor it was handed.
BreakEntry = tuple[int, tuple[TensorLayout, ...]]
# What a break was handed, as types: ``(label, children)``, a tensor labelled by its type and
# view bits ("Tensor (conj)"), a container by its type (a namedtuple by its own name, a dict
# with its keys) over its items, anything else by its type.
Structure = tuple[str, tuple[Any, ...]]


def type_label(cls: type) -> str:
    """A type as a finding names it: a namedtuple says that it is one (``namedtuple Pair``),
    since what breaks is being one, whatever the user named it."""
    fields = getattr(cls, "_fields", None)
    named = issubclass(cls, tuple) and isinstance(fields, tuple)
    return f"namedtuple {cls.__name__}" if named else cls.__name__


# What a structure label says of an object the caller keeps and updates in place.
OWNED = " (the runner's own)"
# Values that are one object wherever they appear (a small int), never the runner's own.
_SHARED_ATOMS = (int, float, str, bytes, type(None))


def call_structure(
    args: Sequence[Any], kwargs: Mapping[str, Any], owned: frozenset[int] = frozenset()
) -> Structure:
    """The types of one call's arguments: its positional ones, then its keywords by name.
    Objects whose ids are in ``owned`` (the runner's, updated in place) are labelled so."""
    keywords = ", ".join(kwargs)
    return (
        "call",
        (
            ("positional arguments", tuple(structure(v, owned) for v in args)),
            (
                f"keyword arguments [{keywords}]",
                tuple(structure(v, owned) for v in kwargs.values()),
            ),
        ),
    )


def structure(value: Any, owned: frozenset[int] = frozenset()) -> Structure:
    """The types ``value`` is made of, nested as it is (see :data:`Structure`); a tensor's
    Python attributes are named with its type, as a break may read them, and an object of
    ``owned`` is labelled as the runner's (:data:`OWNED`)."""
    if owned and id(value) in owned:
        label, children = structure(value)
        return (label + OWNED, children)
    if isinstance(value, torch.Tensor):
        bits = [b for b, on in (("conj", value.is_conj()), ("neg", value.is_neg())) if on]
        label = type(value).__name__ + (f" ({', '.join(bits)})" if bits else "")
        attributes = value.__dict__
        if attributes:
            label += f" with attributes [{', '.join(sorted(map(str, attributes)))}]"
        return (label, ())
    if isinstance(value, (list, tuple)):
        return (type_label(type(value)), tuple(structure(v, owned) for v in value))
    if isinstance(value, dict):
        keys = ", ".join(map(str, value))
        return (f"dict[{keys}]", tuple(structure(v, owned) for v in value.values()))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return (
            type_label(type(value)),
            tuple(structure(getattr(value, f.name), owned) for f in fields),
        )
    return (type_label(type(value)), ())


def first_difference(got: Structure, expected: Structure) -> tuple[str, str] | None:
    """The first node, depth first, where ``got`` differs from ``expected``, as its two labels
    (``("tuple", "Pair")``, ``("Tensor", "Tensor (conj)")``), or None when they are equal."""
    if got == expected:
        return None
    if got[0] != expected[0]:
        return got[0], expected[0]
    if len(got[1]) != len(expected[1]):  # the same container, more or fewer items
        return f"{got[0]} of {len(got[1])}", f"{expected[0]} of {len(expected[1])}"
    for item, want in zip(got[1], expected[1]):
        found = first_difference(item, want)
        if found is not None:
            return found
    return None


def handed_otherwise(
    replayed: Sequence[tuple[int, Structure]], captured: Sequence[tuple[int, Structure]]
) -> tuple[int, str, str] | None:
    """The first break call of a replay handed something of other types than at capture:
    ``(step, what it got, what it was given)``, or None."""
    for (step, got), (captured_step, given) in zip(replayed, captured):
        if step != captured_step:
            return None  # calls out of step: the break count or order names that
        difference = first_difference(got, given)
        if difference is not None:
            return (step, *difference)
    return None


def called_otherwise(
    replayed: Sequence[tuple[int, Any]],
    captured: Sequence[tuple[int, Any]],
    capture_caller: Any,
    replay_caller: Any,
) -> tuple[int, str] | None:
    """The first break call of a replay made under other ambient state than an eager run of
    the region at replay would give it: what the replay's caller has (``replay_caller``),
    with what the region set around the call at capture (where the call saw other than the
    capture's caller, ``capture_caller``) on top. ``(step, the difference in words)``, or
    None."""
    for (step, seen), (captured_step, was) in zip(replayed, captured):
        if step != captured_step:
            return None  # calls out of step: the break count or order names that
        expected = tuple(
            item if item != outside else now
            for item, outside, now in zip(was, capture_caller, replay_caller)
        )
        difference = seen_difference(seen, expected)
        if difference is not None:
            return step, difference
    return None


def called_otherwise_message(changed: tuple[int, str], program: Program) -> str:
    """A finding's words for :func:`called_otherwise`'s answer."""
    step, difference = changed
    brk = program.steps[step] if 0 <= step < len(program.steps) else None
    around = f" (called inside {brk.ambient})" if brk is not None and brk.ambient else ""
    return (
        f"break step {step} ({brk.op if brk else '?'}){around} ran at replay under {difference}: "
        "the target does not call it at replay under the state its region set around it"
    )


def handed_otherwise_message(changed: tuple[int, str, str], program: Program) -> str:
    """A finding's words for :func:`handed_otherwise`'s answer."""
    step, got, given = changed
    op = program.steps[step].op if 0 <= step < len(program.steps) else "?"
    if given == got + OWNED:
        return (
            f"break step {step} ({op}): the {got} given to a break is the runner's own, updated "
            "in place before every replay, and reached it at replay as a copy made at capture: "
            "what the runner updates between replays does not reach the break"
        )
    return (
        f"break step {step} ({op}): {given} given to a break reached it at replay as {got}, "
        f"not as {given}"
    )


# The very text a reproducer prints, so that both make the same host values.
_HOST_CODE = compile(HOST_SOURCE, "<host values>", "exec")


def _host_functions() -> dict[str, Any]:
    namespace: dict[str, Any] = {"torch": torch, "dataclasses": dataclasses}
    exec(_HOST_CODE, namespace)
    return namespace


def make_host(count: int, seed: int) -> Any:
    """A program's host values: a fresh ``HostMeta`` of ``count`` sequences for ``seed``."""
    return _host_functions()["make_host"](count, seed)


def update_host(host: Any, seed: int) -> None:
    """Rewrites ``host`` in place with ``seed``'s values, as a runner does before a replay."""
    _host_functions()["update_host"](host, seed)


def _identity(fn: Callable[..., Any]) -> Callable[..., Any]:
    return fn


def _layout(t: torch.Tensor) -> TensorLayout:
    try:
        strides = tuple(t.stride())
    except RuntimeError:  # a sparse tensor has no strides
        strides = ()
    return TensorLayout(t.dtype, tuple(t.shape), strides, t.data_ptr())


def tensor_layouts(args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[TensorLayout, ...]:
    """The layout of every tensor of one call's arguments, in the order they are flattened."""
    leaves, _ = tree_flatten((args, kwargs))
    return tuple(_layout(v) for v in leaves if isinstance(v, torch.Tensor))


# What can differ between two layouts, the most telling first: an address alone moves with
# any of the others (a copy in another layout), not they with it.
LAYOUT_ASPECTS = ("dtype", "shape", "strides", "address")


def handed_layout(
    replayed: Sequence[BreakEntry], captured: Sequence[BreakEntry]
) -> tuple[int, int, TensorLayout, TensorLayout, list[str]] | None:
    """The first tensor a replay handed a break in another layout than the capture did:
    ``(step, which tensor argument, what it got, what it was given, the aspects that
    differ)``, or None; calls out of step are the break count's or order's to name."""
    for (step, got), (captured_step, given) in zip(replayed, captured):
        if step != captured_step or len(got) != len(given):
            return None
        for index, (mine, theirs) in enumerate(zip(got, given)):
            aspects = [a for a in LAYOUT_ASPECTS if getattr(mine, a) != getattr(theirs, a)]
            if aspects:
                return step, index, mine, theirs, aspects
    return None


def handed_layout_message(
    changed: tuple[int, int, TensorLayout, TensorLayout, list[str]], program: Program
) -> str:
    """A finding's words for :func:`handed_layout`'s answer."""
    step, index, got, given, aspects = changed
    op = program.steps[step].op if 0 <= step < len(program.steps) else "?"
    return (
        f"break step {step} ({op}): tensor argument {index} reached it at replay with another "
        f"{' and '.join(aspects)} than the capture handed it ({got}, given {given}): the "
        "target does not hand a break at replay the tensor it was given"
    )


def _aliases(result: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """Whether a tensor of ``result`` shares memory with a tensor argument."""
    leaves, _ = tree_flatten((args, kwargs))
    memory = {v.untyped_storage().data_ptr() for v in leaves if isinstance(v, torch.Tensor)}
    returned, _ = tree_flatten(result)
    return any(
        isinstance(v, torch.Tensor) and v.untyped_storage().data_ptr() in memory for v in returned
    )


# Per thread, the logs whose captures are replaying, innermost last: a break called at replay
# belongs to the innermost (a break may replay another capture inside it).
_REPLAYING = threading.local()


@contextlib.contextmanager
def replaying(log: BreakLog) -> Iterator[None]:
    """While ``log``'s capture replays: a top-level call of another log's break is noted in
    ``log.foreign``, work another capture recorded that this replay ran."""
    stack = _REPLAYING.__dict__.setdefault("logs", [])
    stack.append(log)
    try:
        yield
    finally:
        stack.pop()


def foreign_message(foreign: Sequence[tuple[int, str]]) -> str:
    """A finding's words for the breaks of other captures a replay ran."""
    step, name = foreign[0]
    return (
        f"the replay ran {len(foreign)} call(s) of breaks that another capture recorded, first "
        f"`{name}` (step {step} of that capture's program): the target replays work recorded "
        "by other capture objects"
    )


class BreakLog:
    """Records ``(step index, tensor argument layouts)`` once per break step call.

    Calls nested inside a logged call (a break calling another decorated function) are not
    recorded: accounting is per program step. A function shared by several steps is wrapped
    with those ``steps``: a call made through :meth:`at` logs the step named there; a call
    the target makes itself (at replay) logs the first of them after the step logged last,
    which is the step it stands for in a target that replays calls in order (one out of
    order, or with the wrong step's arguments, then shows as wrong buffers or counts).
    For ``watch_alias`` functions it also notes in ``aliased`` whether each call's result
    shared memory with its arguments. ``structures`` holds what each call was handed
    (:func:`structure`), so a replay can be compared with the capture before the break's own
    code trips over an argument that changed type; ``seen`` the ambient state each call ran
    under (:func:`~verification.ops.ambient.ambient_seen`), whatever the break reads of it.
    """

    def __init__(self) -> None:
        self.entries: list[BreakEntry] = []
        self.aliased: list[tuple[int, bool]] = []
        self.structures: list[tuple[int, Structure]] = []
        self.seen: list[tuple[int, Any]] = []
        # Ids of the objects the runner keeps and updates in place (its host metadata).
        self.owned: frozenset[int] = frozenset()
        # Calls of other logs' breaks made while this log's capture replayed (:func:`replaying`).
        self.foreign: list[tuple[int, str]] = []
        self._named: int | None = None
        self._last = -1
        self._depth = 0
        # Set to explain a mismatch (verification.divergence.Recorder): keeps each call's
        # arguments and result, which the log otherwise records only as pointers and types.
        self.recorder: Any = None

    def at(self, step: int, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` (a shared function) called for ``step``."""

        @forwarder
        def call(*args: Any, **kwargs: Any) -> Any:
            self._named = step
            return fn(*args, **kwargs)

        return call

    def _step(self, steps: Sequence[int]) -> int:
        named, self._named = self._named, None
        if named is not None:
            return named
        return next((s for s in steps if s > self._last), steps[0])

    def wrap(
        self, step: int | Sequence[int], fn: Callable[..., Any], watch_alias: bool = False
    ) -> Callable[..., Any]:
        shared = None if isinstance(step, int) else tuple(step)
        name = getattr(fn, "__name__", "break")

        @functools.wraps(fn)
        @forwarder
        def logged(*args: Any, **kwargs: Any) -> Any:
            top = self._depth == 0
            here = step if shared is None else self._step(shared) if top else -1
            if top:
                replaying_now = getattr(_REPLAYING, "logs", None)
                if replaying_now and replaying_now[-1] is not self:
                    replaying_now[-1].foreign.append((here, name))
                self.entries.append((here, tensor_layouts(args, kwargs)))
                self.structures.append((here, call_structure(args, kwargs, self.owned)))
                self.seen.append((here, ambient_seen()))
                self._last = here
            record = self.recorder.before(here, fn, args, kwargs) if top and self.recorder else None
            # Which break a call that never returns was in (verification.bounds names it).
            call = f"break step {here} ({name})" if top else ""
            if top:
                breadcrumbs.enter(call)
            self._depth += 1
            try:
                result = fn(*args, **kwargs)
            finally:
                self._depth -= 1
                if top:
                    breadcrumbs.leave(call)
            if record is not None:
                self.recorder.after(record, args, kwargs, result)
            if top and watch_alias:
                self.aliased.append((here, _aliases(result, args, kwargs)))
            return result

        return logged

    def take(self) -> list[BreakEntry]:
        entries, self.entries = self.entries, []
        self._last, self._named = -1, None
        return entries

    def clear(self) -> None:
        """Forgets every call recorded so far (a warm-up's, or a replay's that raised)."""
        self.take()
        self.take_foreign()
        self.take_aliased()
        self.take_structures()
        self.take_seen()

    def take_foreign(self) -> list[tuple[int, str]]:
        foreign, self.foreign = self.foreign, []
        return foreign

    def take_seen(self) -> list[tuple[int, Any]]:
        seen, self.seen = self.seen, []
        return seen

    def take_structures(self) -> list[tuple[int, Structure]]:
        structures, self.structures = self.structures, []
        return structures

    def take_aliased(self) -> list[tuple[int, bool]]:
        aliased, self.aliased = self.aliased, []
        return aliased


def step_callables(
    program: Program, table: Mapping[str, OpSpec], decorate: Decorate, log: BreakLog
) -> list[Callable[..., Any]]:
    """The callable of each step; break steps are logged, then decorated with ``decorate``
    as the step's binding defines them (``Step.bind``). Steps of one op and function slot
    (``Step.fn``) call one callable, built once."""

    def decorate_step(index: int | Sequence[int], bind: str, watch: bool = False) -> Decorate:
        return lambda fn: bound_as(bind, decorate, log.wrap(index, fn, watch))

    slots: dict[tuple[str, int], list[int]] = {}
    for index, step in enumerate(program.steps):
        if step.fn >= 0:
            slots.setdefault((step.op, step.fn), []).append(index)
    shared: dict[tuple[str, int], Callable[..., Any]] = {}

    def step_callable(index: int, step: Step) -> Callable[..., Any]:
        spec = table[step.op]
        if step.fn >= 0:
            key = (step.op, step.fn)
            if key not in shared:
                steps = slots[key]
                bind = program.steps[steps[0]].bind
                shared[key] = spec.callable_for(decorate_step(steps, bind, spec.alias_varies))
            return log.at(index, shared[key])
        if spec.kind == "break":
            return spec.callable_for(decorate_step(index, step.bind, spec.alias_varies))
        if step.brk:
            return decorate_step(index, step.bind)(spec.callable_for(_identity))
        return spec.callable_for(_identity)

    callables = []
    for index, step in enumerate(program.steps):
        try:
            callables.append(step_callable(index, step))
        except BaseException as error:  # the target's decorator refused the definition
            note_step(error, index, step)
            raise
    return callables


def note_step(error: BaseException, index: int, step: Step) -> None:
    """Notes on ``error`` that step ``index`` raised it, and how the step was called."""
    way = call_way(step)
    kind = "break" if step.brk else "op"
    causes.note_step(error, f"step {index}, {kind} {step.op}" + (f": {way}" if way else ""))


def run_steps(
    program: Program,
    table: Mapping[str, OpSpec],
    callables: Sequence[Callable[..., Any]],
    inputs: Sequence[torch.Tensor],
    hook: Callable[[int, dict[int, torch.Tensor]], None] | None = None,
    host: Any = None,
) -> list[torch.Tensor]:
    """Runs the steps on ``inputs`` and returns the output values, dropping dead values.

    ``hook(step index, live values)``, if given, is called before each step and once more
    (index ``len(steps)``) after the last (the property checks inject faults and sleeps there).
    ``host``: the program's host values, given to each step that names a form of them.
    """
    env: dict[int, torch.Tensor] = dict(enumerate(inputs))
    next_value = len(inputs)
    for index, (step, fn) in enumerate(zip(program.steps, callables)):
        if hook is not None:
            hook(index, env)
        args = [tagged(env[a]) if step.tag else env[a] for a in step.args]
        if step.host:
            args.append(host_argument(step.host, host))
        try:
            if step.ambient:
                with ambient_context(step.ambient):
                    result = fn(*args, **step.kwargs)
            else:
                result = fn(*args, **step.kwargs)
        except BaseException as error:
            note_step(error, index, step)
            raise
        if produces_value(table[step.op]):
            env[next_value] = result
            next_value += 1
        for value in step.drop:
            del env[value]
    if hook is not None:
        hook(len(program.steps), env)
    return [env[v] for v in program.outputs]


def state_left() -> tuple[Any, Any]:
    """What a run leaves its caller's thread for the next step: the ambient state a break
    can read (grad and inference mode, autocast, default dtype ...) and the device
    generator's state, which a replay must advance as eager does."""
    try:
        generator = torch.cuda.get_rng_state()
    except RuntimeError:  # no device generator to ask
        generator = None
    return ambient_seen(), generator


def left_otherwise(got: tuple[Any, Any], expected: tuple[Any, Any]) -> str | None:
    """Why the state a replay left differs from what eager leaves, in words, or None."""
    (seen, generator), (seen_eager, generator_eager) = got, expected
    for (name, value), (_, eager) in zip(seen, seen_eager):
        if value != eager:
            return (
                f"after the replay its caller finds {name} {value!r} where eager leaves "
                f"{eager!r}: the replay changed state of the caller's thread and left it so"
            )
    if generator is not None and generator_eager is not None:
        if not torch.equal(generator, generator_eager):
            return (
                "after the replay the device generator is not where eager leaves it: the "
                "replay did not advance it as its random ops and breaks do (a generator "
                "forked or reseeded around a step gives every replay the same numbers)"
            )
    return None


def seed_rng(seed: int, device: str) -> None:
    # Not torch.manual_seed: it also seeds every lazily-initialised backend (xpu, mps), and
    # each of those records a stack trace per call, a third of a simulated example's time.
    torch.default_generator.manual_seed(seed)
    # The simulator keeps a device generator apart from the host's, as CUDA does (its
    # patched torch.cuda.manual_seed seeds it): seeding only the host one there lets eager
    # and replay draw different numbers.
    if device in ("cuda", "sim"):
        torch.cuda.manual_seed(seed)


def run_eager(
    program: Program,
    table: Mapping[str, OpSpec],
    inputs: Sequence[torch.Tensor],
    rng_seed: int,
    device: str,
    log: BreakLog | None = None,
) -> list[torch.Tensor]:
    """The reference: every step eagerly, breaks through the identity decorator, on host
    values made for ``rng_seed``."""
    callables = step_callables(program, table, _identity, log or BreakLog())
    seed_rng(rng_seed, device)
    host = make_host(program.host, rng_seed) if program.host else None
    return run_steps(program, table, callables, [x.clone() for x in inputs], host=host)


_collector_lock = threading.Lock()
_collector_pauses = 0
_collector_was_enabled = True


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Keeps Python's cyclic collector from running while the harness captures.

    The collector frees graphs that earlier examples left in reference cycles, and freeing a
    captured graph while a capture is open breaks that capture on a GPU
    (``bench/probes/reset_during_capture.py``): a failure of no target's making, which a check
    would report as a false ``nested`` finding. Counted, so that captures
    in several threads (the ``threads`` property) re-enable it only when the last one ends.
    The library has its own copy (``breakable_cudagraph.collector``): the harness must not
    run on code it may be judging, and ``mutate`` swaps that package for mutants.
    """
    global _collector_pauses, _collector_was_enabled
    with _collector_lock:
        if _collector_pauses == 0:
            _collector_was_enabled = gc.isenabled()
            gc.disable()
        _collector_pauses += 1
    try:
        yield
    finally:
        with _collector_lock:
            _collector_pauses -= 1
            if _collector_pauses == 0 and _collector_was_enabled:
                gc.enable()


# What a GPU capture's pool is filled with before a capture of a program holding an untrusted
# op, so that the op reading a value no graph has computed yet (the segment before it is
# captured, not run) reads a hostile one, as on the simulator: the simulator's int16 pattern,
# NaN in every float dtype and near the top of every integer dtype. Two 1 MiB blocks make one
# small-pool segment of 2 MiB, where a capture's small intermediates come from; the capture
# then uses that segment instead of a new one, so poisoning costs no memory. (Poisoning 24 MiB
# into a pool no capture used kept every GPU worker's reserve growing until tests ran out.)
_POISON_BLOCKS = (1 << 19, 1 << 19)  # int16 elements


def poison_pool(pool: Any) -> Any:
    """Fills one small-pool segment of graph pool ``pool``, on the current stream, with the
    poison pattern; a capture into ``pool`` on this stream is then handed it. Returns the
    graph that filled it, which keeps the pool alive and must outlive the capture's start."""
    graph = torch.cuda.CUDAGraph()
    with collector_paused():
        graph.capture_begin(pool=pool, capture_error_mode="thread_local")
        try:
            blocks = [torch.empty(n, dtype=torch.int16, device="cuda") for n in _POISON_BLOCKS]
            for block in blocks:
                block.fill_(POISON_INT16)
        finally:
            graph.capture_end()
    del blocks  # free in the pool, so the capture that follows is handed them
    graph.replay()
    return graph


class CapturedProgram:
    """A program captured once by ``target`` on static inputs, ready to replay; into
    ``pool`` when one is given, else into the target's own."""

    def __init__(
        self,
        program: Program,
        table: Mapping[str, OpSpec],
        target: Target,
        inputs: Sequence[torch.Tensor],
        rng_seed: int,
        device: str,
        pool: Any = None,
    ) -> None:
        self.log = BreakLog()
        self.device = device
        self.static_inputs = [x.clone() for x in inputs]
        # The runner's host values: made once, rewritten in place before every replay.
        self.host = make_host(program.host, rng_seed) if program.host else None
        if self.host is not None:
            # Its objects, not the numbers in it: a small int is one object everywhere.
            kept = (self.host, *vars(self.host).values())
            self.log.owned = frozenset(id(o) for o in kept if not isinstance(o, _SHARED_ATOMS))
        # Steps whose result switched between aliasing an argument and not, last replay.
        self.alias_switched: set[int] = set()
        callables = step_callables(program, table, target.eager_break_during_capture, self.log)
        # Capture from a stream of the harness's own, as real users do, so that a target
        # expecting its caller to pick the stream is exercised correctly.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            seed_rng(rng_seed, device)
            run_steps(program, table, callables, self.static_inputs, host=self.host)
            self.log.clear()  # the warm-up's calls
            # The simulator hands a capture poisoned memory itself; a GPU's pool holds
            # whatever its memory last held, so it is poisoned for an untrusted op.
            poisoner = None
            if device == "cuda" and any(table[s.op].untrusted for s in program.steps):
                pool = torch.cuda.graph_pool_handle() if pool is None else pool
                poisoner = poison_pool(pool)
            # A pool given is shared with other captures of the program (a capture set).
            self.capture = (
                target.BreakableCUDAGraphCapture()
                if pool is None
                else target.BreakableCUDAGraphCapture(pool=pool)
            )
            seed_rng(rng_seed, device)
            self.capture_caller = ambient_seen()
            with collector_paused(), self.capture as entered:
                # A caller may write `with BreakableCUDAGraphCapture() as capture:` and replay
                # what `as` bound: vLLM's, SGLang's and the PyPI peers' __enter__ return self.
                if entered is not self.capture:
                    raise TypeError(
                        f"`with BreakableCUDAGraphCapture() as capture` bound {entered!r}, not "
                        "the capture: __enter__ must return self for such a caller to replay it"
                    )
                self.outputs = run_steps(
                    program, table, callables, self.static_inputs, host=self.host
                )
            del poisoner  # the capture holds the pool now
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        self.capture_log = self.log.take()
        self.capture_aliased = dict(self.log.take_aliased())
        self.capture_structures = self.log.take_structures()
        self.capture_seen = self.log.take_seen()
        # A break of the last replay handed something of other types than at capture:
        # (step, what it got, what it was given at capture), the first such call.
        self.structure_changed: tuple[int, str, str] | None = None
        self.replayed_log: list[BreakEntry] = []
        # Breaks of other captures the last replay ran (:func:`replaying`).
        self.foreign: list[tuple[int, str]] = []
        # A break of the last replay called under other ambient state than at capture:
        # (step, the difference in words), the first such call.
        self.ambient_changed: tuple[int, str] | None = None

    def replay(self, inputs: Sequence[torch.Tensor], rng_seed: int) -> list[BreakEntry]:
        """Copies ``inputs`` into the static inputs, rewrites the host values for
        ``rng_seed``, replays, and returns the break log."""
        for static, value in zip(self.static_inputs, inputs):
            static.copy_(value)
        if self.host is not None:
            update_host(self.host, rng_seed)
        seed_rng(rng_seed, self.device)
        replay_caller = ambient_seen()
        try:
            with replaying(self.log):
                self.capture.replay()
            torch.cuda.synchronize()
        finally:
            # Kept for a replay that raised: the calls it made before, in which layouts.
            entries = self.replayed_log = self.log.take()
            self.foreign = self.log.take_foreign()
            self.alias_switched = {
                step
                for step, aliased in self.log.take_aliased()
                if self.capture_aliased.get(step, aliased) != aliased
            }
            self.structure_changed = handed_otherwise(
                self.log.take_structures(), self.capture_structures
            )
            self.ambient_changed = called_otherwise(
                self.log.take_seen(), self.capture_seen, self.capture_caller, replay_caller
            )
        return entries
