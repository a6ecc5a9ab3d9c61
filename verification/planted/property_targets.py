"""Copies of the library, each with one planted bug that only a property check can see.

:func:`build` loads a private copy of ``breakable_cudagraph`` (its own modules, its own
thread state) and plants one bug of :data:`BUGS` into it, so every other behaviour is the
library's own. ``strong_arguments`` is not a bug: it holds every break argument strongly,
as ``lambda: fn(*args)`` would, and (as vLLM) does not declare it releases them; the memory
property must report it as memory held, never as a failure. The same holding under the
library's declaration, ``arguments_held_despite_declaring``, is a bug.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import torch

import breakable_cudagraph

# Closures the ``closures_kept_forever`` copy never lets go of.
KEPT: list[Any] = []


def _copy(tag: str) -> ModuleType:
    name = f"_bcg_planted_{tag}"
    if name in sys.modules:
        return sys.modules[name]
    root = Path(breakable_cudagraph.__file__).parent
    spec = importlib.util.spec_from_file_location(
        name, root / "__init__.py", submodule_search_locations=[str(root)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def library_target(
    lib: ModuleType, family: str, module: str, variant: str | None, contract: str = "returns"
) -> SimpleNamespace:
    """The target API over the library copy ``lib``, named ``planted-<family>[<variant>]``; its
    reproducer rebuilds it with ``build(variant)`` of the planted module ``module``."""
    return SimpleNamespace(
        __name__=f"planted-{family}[{variant or 'clean'}]",
        BreakableCUDAGraphCapture=lib.BreakableCUDAGraphCapture,
        eager_break_during_capture=lib.eager_break_during_capture,
        BreakableGraphRunner=lib.BreakableGraphRunner,
        CaptureSet=lib.CaptureSet,
        BREAK_CONTRACT=contract,
        RELEASES_BREAK_ARGUMENTS=lib.RELEASES_BREAK_ARGUMENTS,
        REPRODUCER_IMPORT=(
            f"from verification.planted.{module} import build\ntarget = build({variant!r})"
        ),
    )


def _capture_holds_itself(lib: ModuleType) -> None:
    cls = lib.BreakableCUDAGraphCapture
    enter = cls.__enter__

    def __enter__(self: Any) -> Any:
        self._on_replay = self.replay  # a bound method of its own: a reference cycle
        return enter(self)

    cls.__enter__ = __enter__


def _global_active_capture(lib: ModuleType) -> None:
    lib.thread_state._state = SimpleNamespace()  # one slot for the whole process


def _state_left_active(lib: ModuleType) -> None:
    cls = lib.BreakableCUDAGraphCapture
    abort = cls._abort

    def _abort(self: Any, exc: BaseException) -> None:
        abort(self, exc)
        lib.thread_state.set_active_capture(self)

    cls._abort = _abort


def _private_pool_per_segment(lib: ModuleType) -> None:
    def _begin_graph(self: Any) -> None:
        graph = torch.cuda.CUDAGraph()
        graph.capture_begin(
            pool=torch.cuda.graph_pool_handle(), capture_error_mode=self.capture_error_mode
        )
        self._open_graph = graph

    lib.BreakableCUDAGraphCapture._begin_graph = _begin_graph


def _pool_not_honoured(lib: ModuleType) -> None:
    cls = lib.BreakableCUDAGraphCapture
    init = cls.__init__

    def __init__(self: Any, pool: Any = None, **options: Any) -> None:
        # The pool given is dropped: every segment goes to a private handle of this capture.
        init(self, None, **options)

    cls.__init__ = __init__


def _closures_kept_forever(lib: ModuleType) -> None:
    cls = lib.BreakableCUDAGraphCapture
    record = cls._record_step

    def _record_step(self: Any, *args: Any) -> None:
        record(self, *args)
        step = self._segments[-1]
        KEPT.append((step.call, step.static_result))

    cls._record_step = _record_step


def _nested_capture_let_through(lib: ModuleType) -> None:
    cls = lib.BreakableCUDAGraphCapture
    enter = cls.__enter__

    def __enter__(self: Any) -> Any:
        outer = lib.thread_state.active_capture()
        lib.thread_state.set_active_capture(None)  # the nesting check sees nothing open
        try:
            return enter(self)
        except BaseException:
            lib.thread_state.set_active_capture(outer)
            raise

    cls.__enter__ = __enter__


def _nested_capture_begun(lib: ModuleType) -> None:
    # Only the thread's own nesting check: a capture opened inside a capture (not in an eager
    # step) goes on to capture_begin on the stream already capturing, which torch refuses.
    cls = lib.BreakableCUDAGraphCapture
    enter = cls.__enter__

    def __enter__(self: Any) -> Any:
        outer = lib.thread_state.active_capture()
        if outer is not None and not lib.thread_state.in_eager_step():
            lib.thread_state.set_active_capture(None)
            real = torch.cuda.is_current_stream_capturing
            torch.cuda.is_current_stream_capturing = lambda: False  # type: ignore[assignment]
            try:
                return enter(self)
            except BaseException:
                lib.thread_state.set_active_capture(outer)
                raise
            finally:
                torch.cuda.is_current_stream_capturing = real  # type: ignore[assignment]
        return enter(self)

    cls.__enter__ = __enter__


def _collector_not_paused(lib: ModuleType) -> None:
    lib.collector.pause = lambda: None
    lib.collector.resume = lambda: None


def _collector_never_resumed(lib: ModuleType) -> None:
    lib.collector.resume = lambda: None


def _no_abort_when_capture_end_raises(lib: ModuleType) -> None:
    # As if __exit__ let an exception from the last segment's capture_end out without
    # aborting: the stream context, the active capture and the collector pause stay.
    cls = lib.BreakableCUDAGraphCapture
    exit_ = cls.__exit__

    def __exit__(self: Any, exc_type: Any, exc: Any, tb: Any) -> Any:
        if exc is not None:
            return exit_(self, exc_type, exc, tb)
        self._abort = lambda error: None
        try:
            return exit_(self, exc_type, exc, tb)
        finally:
            del self._abort

    cls.__exit__ = __exit__


def _nested_break_recorded_twice(lib: ModuleType) -> None:
    def eager_break_during_capture(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def eager_break(*args: Any, **kwargs: Any) -> Any:
            capture = lib.thread_state.active_capture()
            if capture is None:
                return fn(*args, **kwargs)
            if lib.thread_state.in_eager_step():
                result = fn(*args, **kwargs)
                call = functools.partial(fn, *args, **kwargs)
                capture._segments.append(
                    lib.segments.EagerStep(getattr(fn, "__name__", repr(fn)), call, None)
                )
                return result
            return capture.add_eager_call(fn, args, kwargs)

        return eager_break

    lib.eager_break_during_capture = eager_break_during_capture


def _nested_break_asserts(lib: ModuleType) -> None:
    # A decorated call made inside an eager step trips an assertion instead of running inline:
    # one bug that every check whose programs nest decorated ops reaches.
    def eager_break_during_capture(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def eager_break(*args: Any, **kwargs: Any) -> Any:
            capture = lib.thread_state.active_capture()
            if capture is None:
                return fn(*args, **kwargs)
            if lib.thread_state.in_eager_step():
                # A bare assertion, as an ``assert`` raises it (pytest would rewrite one here).
                raise AssertionError
            return capture.add_eager_call(fn, args, kwargs)

        return eager_break

    lib.eager_break_during_capture = eager_break_during_capture


def _unordered_side_stream(lib: ModuleType) -> None:
    init = lib.segments.EagerStep.__init__

    def __init__(
        self: Any, name: str, call: Callable[[], Any], static_result: Any, *rest: Any
    ) -> None:
        def on_side_stream() -> Any:
            side = torch.cuda.Stream()  # never waits for the caller, nor the caller for it
            with torch.cuda.stream(side):
                return call()

        init(self, name, on_side_stream, static_result, *rest)  # what every replay runs

    lib.segments.EagerStep.__init__ = __init__


def _strong_arguments(lib: ModuleType) -> None:
    lib.arguments._construct_storage = None  # every tensor argument held by reference
    lib.RELEASES_BREAK_ARGUMENTS = False  # and no promise otherwise, as vLLM


def _arguments_held_despite_declaring(lib: ModuleType) -> None:
    lib.arguments._construct_storage = None  # the declaration stays


def _dataclass_arguments_held(lib: ModuleType) -> None:
    trees = lib.trees
    trees._CONTAINERS = tuple(
        c for c in trees._CONTAINERS if c[0] is not trees._is_dataclass_instance
    )


def _every_object_opened_as_a_dataclass(lib: ModuleType) -> None:
    trees = lib.trees
    trees._CONTAINERS = tuple(
        (lambda tree: not isinstance(tree, type), *rest)
        if is_container is trees._is_dataclass_instance
        else (is_container, *rest)
        for is_container, *rest in trees._CONTAINERS
    )


def _list_arguments_held(lib: ModuleType) -> None:
    children, _ = lib.trees._EXACT[list]
    lib.trees._EXACT[list] = (children, lambda tree, items: tree)  # the list as given


def _capture_end_warnings_swallowed(lib: ModuleType) -> None:
    end_graph = lib.segments.end_graph

    def swallowing(graph: Any) -> bool:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return end_graph(graph)

    lib.capture.end_graph = swallowing


def _is_active_on_instances_only(lib: ModuleType) -> None:
    def is_active(self: Any) -> bool:
        return lib.thread_state.active_capture() is not None

    lib.BreakableCUDAGraphCapture.is_active = is_active


def _runner_stale_inputs(lib: ModuleType) -> None:
    lib.runner.BreakableGraphRunner._copy_inputs = staticmethod(lambda entry, inputs: None)


def _runner_recaptures(lib: ModuleType) -> None:
    lib.runner.input_signature = lambda tree: object()  # no two calls share a signature


def _runner_ignores_pool(lib: ModuleType) -> None:
    cls = lib.runner.BreakableGraphRunner
    init = cls.__init__

    def __init__(self: Any, fn: Any, **options: Any) -> None:
        init(self, fn, **options)
        self.pool = torch.cuda.graph_pool_handle()

    cls.__init__ = __init__


def _runner_eager_results_stale(lib: ModuleType) -> None:
    lib.runner.copy_result_back = lambda name, static, fresh: None


def _runner_debug_blind(lib: ModuleType) -> None:
    lib.runner.BreakableGraphRunner._check_addresses = staticmethod(lambda entry: None)


def _runner_leaves_its_stream(lib: ModuleType) -> None:
    cls = lib.runner.BreakableGraphRunner
    call = cls.__call__

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = call(self, *args, **kwargs)
        torch.cuda.set_stream(torch.cuda.Stream())
        return result

    cls.__call__ = __call__


def _replays_last_capture(lib: ModuleType) -> None:
    # One process-wide "current chain" of eager steps, which the newest capture overwrites:
    # replaying an older capture launches its own graphs but the newest capture's breaks.
    cls = lib.BreakableCUDAGraphCapture
    exit_, replay = cls.__exit__, cls.replay
    newest: list[Any] = [None]

    def __exit__(self: Any, *exc: Any) -> Any:
        result = exit_(self, *exc)
        if self._replay_plan:
            newest[0] = self
        return result

    def replay_(self: Any) -> None:
        last = newest[0]
        if last is None or last is self or not last._replay_plan:
            return replay(self)
        own = self._replay_plan
        self._replay_plan = [
            (call, returns, step, launch)
            for (_, _, _, launch), (call, returns, step, _) in zip(own, last._replay_plan)
        ]
        try:
            return replay(self)
        finally:
            self._replay_plan = own

    cls.__exit__ = __exit__
    cls.replay = replay_


def _capture_restores_default_stream(lib: ModuleType) -> None:
    # Restores "the" stream a caller is assumed to stand on, the default one, not the
    # caller's own: harmless for a caller on the default stream, wrong for an engine's runner.
    cls = lib.BreakableCUDAGraphCapture
    exit_ = cls.__exit__

    def __exit__(self: Any, *exc: Any) -> Any:
        try:
            return exit_(self, *exc)
        finally:
            torch.cuda.set_stream(torch.cuda.default_stream())

    cls.__exit__ = __exit__


def _replay_eager_on_capture_stream(lib: ModuleType) -> None:
    # Each eager step replays on the stream it was captured on, which nothing orders with the
    # stream the chain is replayed on.
    cls = lib.BreakableCUDAGraphCapture
    exit_ = cls.__exit__

    def __exit__(self: Any, *exc: Any) -> Any:
        result = exit_(self, *exc)
        stream = self._stream

        def on_capture_stream(call: Callable[[], Any]) -> Callable[[], Any]:
            def run() -> Any:
                with torch.cuda.stream(stream):
                    return call()

            return run

        self._replay_plan = [
            (on_capture_stream(call), returns, step, launch)
            for call, returns, step, launch in self._replay_plan
        ]
        return result

    cls.__exit__ = __exit__


def _replay_inside_break_deadlocks(lib: ModuleType) -> None:
    # Replays serialised by one lock for every capture, as if replay state were shared: a
    # threading.Lock is not reentrant, so a replay started inside a break of another
    # capture's replay waits forever for the lock its own caller holds.
    cls = lib.BreakableCUDAGraphCapture
    replay = cls.replay
    lock = threading.Lock()

    def replay_(self: Any) -> None:
        with lock:
            replay(self)

    cls.replay = replay_


def _alias_cached_per_address(lib: ModuleType) -> None:
    # Saves building an alias per break by caching one per address for the process: a
    # smaller batch's intermediate where a larger batch's lay gets the larger one's shape.
    memory = lib.arguments.PoolMemory
    make = memory.alias
    cache: dict[tuple[int, torch.dtype], torch.Tensor] = {}

    def alias(self: Any, tensor: torch.Tensor, key: tuple[Any, ...]) -> torch.Tensor:
        address = (tensor.data_ptr(), tensor.dtype)
        if address not in cache:
            cache[address] = make(self, tensor, key)
        return cache[address]

    memory.alias = alias


def _subclass_aliased(lib: ModuleType) -> None:
    # The subclass test dropped, and the alias a plain tensor (the subclass would otherwise
    # survive on it: torch keeps a subclass through new_empty and as_strided).
    _edited("arguments", "        or type(tensor) is not torch.Tensor\n", "")(lib)
    whole = lib.arguments.whole_storage_alias
    lib.arguments.whole_storage_alias = lambda tensor: whole(tensor).as_subclass(torch.Tensor)


def _thread_state_taken_at_construction(lib: ModuleType) -> None:
    # The thread's state slot looked up once, when the capture is built, rather than when it
    # is entered: a capture built in one thread and entered in another registers as open in
    # the thread that built it, and the thread capturing sees none (its decorated calls run
    # inline, into the graph).
    cls = lib.BreakableCUDAGraphCapture
    init, enter, exit_, abort = cls.__init__, cls.__enter__, cls.__exit__, cls._abort
    state = lib.thread_state

    @functools.wraps(init)  # the signature still takes capture_error_mode
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self._slot = state._state.__dict__  # the building thread's own

    def __enter__(self: Any) -> Any:
        enter(self)
        state.set_active_capture(None)
        self._slot["capture"] = self
        return self

    def __exit__(self: Any, *exc: Any) -> Any:
        try:
            return exit_(self, *exc)
        finally:
            self._slot["capture"] = None

    def _abort(self: Any, exc: BaseException) -> None:
        try:
            abort(self, exc)
        finally:
            self._slot["capture"] = None

    cls.__init__, cls.__enter__, cls.__exit__, cls._abort = __init__, __enter__, __exit__, _abort


def _replay_from_another_thread_reads_thread_local(lib: ModuleType) -> None:
    # Each capture's eager calls kept in a per-thread table when it closes (a per-thread cache
    # of held arguments): a replay in another thread finds no calls and runs the graphs alone.
    cls = lib.BreakableCUDAGraphCapture
    exit_ = cls.__exit__
    table = threading.local()

    def from_table(key: int, index: int) -> Any:
        calls = getattr(table, "calls", {}).get(key)
        return None if calls is None else calls[index]()

    def __exit__(self: Any, *exc: Any) -> Any:
        result = exit_(self, *exc)
        if self._replay_plan:
            table.__dict__.setdefault("calls", {})[id(self)] = [
                call for call, *_ in self._replay_plan
            ]
            self._replay_plan = [
                (functools.partial(from_table, id(self), index), returns, step, launch)
                for index, (_, returns, step, launch) in enumerate(self._replay_plan)
            ]
        return result

    cls.__exit__ = __exit__


def _edited(module: str, old: str, new: str, *more: str) -> Callable[[ModuleType], None]:
    """A plant that rewrites ``old`` (found once) as ``new`` in the copy's ``module``, as a
    mutant does: these bugs sit in a signature or a condition, which a patch could only
    imitate by rewriting the whole function. ``more`` gives further (old, new) pairs of the
    same module's source, rewritten in the same pass."""
    pairs = [(old, new), *zip(more[::2], more[1::2])]

    def plant(lib: ModuleType) -> None:
        namespace = vars(getattr(lib, module))
        path = Path(namespace["__file__"])
        source = path.read_text()
        for before_text, after_text in pairs:
            if source.count(before_text) != 1:
                raise ValueError(
                    f"{path} no longer holds {before_text!r} once; update the planted bug"
                )
            source = source.replace(before_text, after_text)
        before = dict(namespace)
        # Functions already bound elsewhere look their globals up in this same namespace.
        exec(compile(source, str(path), "exec"), namespace)
        # Names the package and its other modules imported from this one (the decorator, the
        # runner, end_graph) are rebound to the rewritten objects.
        own = lib.__name__ + "."
        modules = [lib] + [
            m
            for m in vars(lib).values()
            if isinstance(m, ModuleType) and m.__name__.startswith(own)
        ]
        for other in modules:
            for name, value in list(vars(other).items()):
                if name in namespace and before.get(name) is value is not namespace[name]:
                    setattr(other, name, namespace[name])

    return plant


_runner_edited = functools.partial(_edited, "runner")


def _runner_default_warmup_not_as_declared(lib: ModuleType) -> None:
    cls = lib.runner.BreakableGraphRunner
    init = cls.__init__

    @functools.wraps(init)  # so the signature still declares warmup=1
    def __init__(self: Any, *args: Any, warmup: int = 2, **options: Any) -> None:
        init(self, *args, warmup=warmup, **options)

    cls.__init__ = __init__


def _runner_refusal_leaves_its_stream(lib: ModuleType) -> None:
    cls = lib.runner.BreakableGraphRunner
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        caller = torch.cuda.current_stream()
        torch.cuda.set_stream(torch.cuda.Stream())  # given back only when init returns
        init(self, *args, **kwargs)
        torch.cuda.set_stream(caller)

    cls.__init__ = __init__


def _runner_refusal_leaves_a_capture_active(lib: ModuleType) -> None:
    cls = lib.runner.BreakableGraphRunner
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        # Opens its first capture before checking its arguments; closed only when init returns.
        lib.thread_state.set_active_capture(lib.BreakableCUDAGraphCapture())
        init(self, *args, **kwargs)
        lib.thread_state.set_active_capture(None)

    cls.__init__ = __init__


# Every capture shares executables (see breakable_cudagraph.executables), as with
# BREAKABLE_CUDAGRAPH_SHARE_EXECUTABLES=1: the sharing bugs below need it on.
_SHARING_ON = ('return os.environ.get(SHARE_ENV, "") == "1"', "return True")


# name -> (what it plants, the property that must find it, how to plant it)
BUGS: dict[str, tuple[str, str, Callable[[ModuleType], None]]] = {
    "global_active_capture": (
        "a process-global active capture instead of a per-thread one",
        "threads",
        _global_active_capture,
    ),
    "global_active_capture_under_out_buffer": (
        "a process-global active capture, judged as vLLM's module is (out-buffer: its runner "
        "captures from one thread at a time, which leaves other threads' eager calls free)",
        "threads",
        _global_active_capture,
    ),
    "add_eager_from_any_thread": (
        "add_eager on an open capture is taken from any thread, not only the capturing one",
        "threads",
        _edited(
            "capture",
            "if thread_state.active_capture() is not self or self._state not in _OPEN:",
            "if thread_state.active_capture() is not self and self._state not in _OPEN:",
        ),
    ),
    "thread_state_taken_at_construction": (
        "a capture takes its thread's state slot when built, not when entered: one built in "
        "another thread registers as open in the thread that built it",
        "threads",
        _thread_state_taken_at_construction,
    ),
    "replay_from_another_thread_reads_thread_local": (
        "replay finds its eager calls in a per-thread table filled at capture: a replay in "
        "another thread runs the graphs alone",
        "threads",
        _replay_from_another_thread_reads_thread_local,
    ),
    "state_left_active": (
        "the active capture left set after an exception",
        "faults",
        _state_left_active,
    ),
    "private_pool_per_segment": ("a private pool per segment", "pool", _private_pool_per_segment),
    "pool_not_honoured": (
        "a capture ignores the pool it is given and takes a private graph_pool_handle() for its "
        "segments",
        "pool",
        _pool_not_honoured,
    ),
    "closures_kept_forever": (
        "every eager closure kept alive forever",
        "pool",
        _closures_kept_forever,
    ),
    "nested_capture_let_through": (
        "a nested capture let through",
        "nested",
        _nested_capture_let_through,
    ),
    "nested_capture_begun": (
        "a nested capture refused only by torch's capture_begin (a process abort on a GPU)",
        "nested",
        _nested_capture_begun,
    ),
    "nested_break_asserts": (
        "a decorated call inside an eager step raises AssertionError instead of running inline",
        "nested",
        _nested_break_asserts,
    ),
    "nested_break_recorded_twice": (
        "a decorated call inside an eager step records a second break",
        "nested",
        _nested_break_recorded_twice,
    ),
    "replay_inside_break_deadlocks": (
        "replay() takes a non-reentrant lock, so a replay started inside a break of another "
        "capture's replay never returns",
        "nested",
        _replay_inside_break_deadlocks,
    ),
    "decorator_without_wraps": (
        "the break decorator returns a wrapper without functools.wraps",
        "nested",
        _edited("breaks", "    @functools.wraps(fn)\n", ""),
    ),
    "unordered_side_stream": (
        "eager steps run on a stream the caller's stream never waits for",
        "stream-order",
        _unordered_side_stream,
    ),
    "capture_ignores_the_default_stream": (
        "a capture entered from the default stream runs on a stream of its own that does not "
        "wait for the default one (the check on the streams compares them the wrong way)",
        "stream-order",
        _edited(
            "capture",
            "        if self._stream != self._caller_stream:\n"
            "            self._stream.wait_stream(self._caller_stream)\n",
            "        if self._stream == self._caller_stream:\n"
            "            self._stream.wait_stream(self._caller_stream)\n",
        ),
    ),
    "arguments_held_despite_declaring": (
        "break arguments held strongly by a target that declares it releases them",
        "pool",
        _arguments_held_despite_declaring,
    ),
    "dataclass_arguments_held": (
        "tensors in a dataclass argument held strongly (the dataclass is not opened)",
        "pool",
        _dataclass_arguments_held,
    ),
    "every_object_opened_as_a_dataclass": (
        "any object in a break's arguments is taken for a dataclass (a dtype, say)",
        "pool",
        _every_object_opened_as_a_dataclass,
    ),
    "list_arguments_held": (
        "a list argument held as given, its tensors strongly",
        "pool",
        _list_arguments_held,
    ),
    "view_bits_dropped": (
        "conjugate and negative views are aliased like plain tensors, losing their bit at replay",
        "pool",
        _edited("arguments", "        or tensor.is_conj()\n        or tensor.is_neg()\n", ""),
    ),
    "subclass_aliased": (
        "tensor subclass instances are aliased like plain tensors, losing their Python type",
        "pool",
        _subclass_aliased,
    ),
    "dict_subclass_rebuilt_plain": (
        "a dict subclass argument (ModelOutput-like) is rebuilt as a plain dict for replay",
        "pool",
        _edited("trees", "    if type(tree) is dict:\n", "    if isinstance(tree, dict):\n"),
    ),
    "capture_end_warnings_swallowed": (
        "every warning capture_end raises is swallowed, not only the empty-graph one",
        "faults",
        _capture_end_warnings_swallowed,
    ),
    "any_capture_end_warning_means_empty": (
        "a graph whose capture_end warned of anything is taken for an empty one and dropped",
        "faults",
        _edited(
            "segments",
            "    empty = any(_EMPTY_GRAPH_WARNING in str(w.message) for w in caught)\n",
            "    empty = True\n",
        ),
    ),
    "caught_break_error_forgotten": (
        "a break's exception caught inside the block is forgotten: the capture closes cut short",
        "faults",
        _edited("capture", "            self._eager_step_error = exc\n", "            pass\n"),
    ),
    "break_error_wrapped": (
        "an exception a break raises at capture reaches its caller wrapped in another",
        "faults",
        _edited(
            "capture",
            "            self._eager_step_error = exc\n            raise\n",
            "            self._eager_step_error = exc\n"
            "            raise RuntimeError('eager step failed') from exc\n",
        ),
    ),
    "collector_not_paused": (
        "the cyclic collector stays on while a capture is open",
        "faults",
        _collector_not_paused,
    ),
    "collector_never_resumed": (
        "the cyclic collector is left off after a capture closes",
        "faults",
        _collector_never_resumed,
    ),
    "no_abort_when_capture_end_raises": (
        "an exception from the last segment's capture_end leaves the capture open",
        "faults",
        _no_abort_when_capture_end_raises,
    ),
    "is_active_on_instances_only": (
        "is_active() is an instance method, so the class cannot answer it",
        "faults",
        _is_active_on_instances_only,
    ),
    "runner_stale_inputs": (
        "the runner does not copy new inputs into its static buffers",
        "runner",
        _runner_stale_inputs,
    ),
    "runner_recaptures": ("the runner captures again on every call", "runner", _runner_recaptures),
    "runner_ignores_pool": (
        "the runner ignores the pool it is given",
        "runner",
        _runner_ignores_pool,
    ),
    "runner_eager_results_stale": (
        "with graphs disabled the runner returns its first call's results",
        "runner",
        _runner_eager_results_stale,
    ),
    "runner_debug_blind": (
        "debug=True never reports a moved static buffer",
        "runner",
        _runner_debug_blind,
    ),
    "runner_leaves_its_stream": (
        "the runner leaves another stream current after a call",
        "runner",
        _runner_leaves_its_stream,
    ),
    "runner_fn_positional_only": (
        "the runner's fn is positional-only, so fn=... is refused",
        "runner",
        _runner_edited("        *,\n", "        /,\n        *,\n"),
    ),
    "runner_options_by_position": (
        "the runner accepts its options by position",
        "runner",
        _runner_edited("        *,\n", ""),
    ),
    "runner_refuses_no_warmup": (
        "the runner refuses warmup=0",
        "runner",
        _runner_edited("warmup < 0", "warmup < 1"),
    ),
    "runner_warms_up_at_least_once": (
        "the runner warms up once even with warmup=0",
        "runner",
        _runner_edited("range(self.warmup)", "range(max(self.warmup, 1))"),
    ),
    "runner_no_replay_without_warmup": (
        "with warmup=0 the runner returns a new signature's outputs unreplayed, never computed",
        "runner",
        _runner_edited("if not eager:", "if not eager and self.warmup:"),
    ),
    "runner_warms_up_at_most_once": (
        "the runner warms up once whatever warmup asks",
        "runner",
        _runner_edited("range(self.warmup)", "range(min(self.warmup, 1))"),
    ),
    "runner_no_default_warmup": (
        "the runner's default warmup is 0: a first run happens inside the capture",
        "runner",
        _runner_edited("warmup: int = 1", "warmup: int = 0"),
    ),
    "runner_default_warmup_not_as_declared": (
        "the runner declares a default warmup of 1 but warms up twice",
        "runner",
        _runner_default_warmup_not_as_declared,
    ),
    "runner_accepts_negative_warmup": (
        "the runner accepts warmup=-1",
        "runner",
        _runner_edited("warmup < 0", "warmup < -1"),
    ),
    "runner_negative_warmup_type_error": (
        "the runner refuses warmup=-1 with a TypeError, not a ValueError",
        "runner",
        _runner_edited('raise ValueError(f"warmup', 'raise TypeError(f"warmup'),
    ),
    "runner_accepts_bool_warmup": (
        "the runner accepts warmup=True",
        "runner",
        _runner_edited("isinstance(warmup, bool) or ", ""),
    ),
    "runner_accepts_float_warmup": (
        "the runner accepts warmup=1.5 (and fails only at its first call)",
        "runner",
        _runner_edited("not isinstance(warmup, int) or ", ""),
    ),
    "runner_warmup_error_unnamed": (
        "the runner's error for a bad warmup does not name warmup",
        "runner",
        _runner_edited('"warmup must be an int', '"expected an int'),
    ),
    "runner_accepts_uncallable": (
        "the runner accepts a fn that is not callable (and fails only at its first call)",
        "runner",
        _runner_edited("if not callable(fn):", "if fn is None:"),
    ),
    "runner_refusal_leaves_its_stream": (
        "a runner refusing its arguments leaves its own stream current",
        "runner",
        _runner_refusal_leaves_its_stream,
    ),
    "runner_refusal_leaves_a_capture_active": (
        "a runner refusing its arguments leaves a capture active in the thread",
        "runner",
        _runner_refusal_leaves_a_capture_active,
    ),
    "replays_last_capture": (
        "replay() runs the eager steps of the newest capture, not its own",
        "pool",
        _replays_last_capture,
    ),
    "capture_restores_default_stream": (
        "closing a capture makes the default stream current, not the caller's stream",
        "stream-order",
        _capture_restores_default_stream,
    ),
    "replay_eager_on_capture_stream": (
        "eager steps replay on the capture's stream, unordered with the replay's stream",
        "stream-order",
        _replay_eager_on_capture_stream,
    ),
    "alias_cached_per_address": (
        "non-owning aliases cached per address: a break given another tensor where an earlier "
        "one lay (a smaller batch's, another layer's) gets the earlier one's view",
        "engine",
        _alias_cached_per_address,
    ),
    "capture_set_slice_off_by_one": (
        "the capture set's smallest size reads its static buffers one row down ([1:size + 1]), "
        "while a call copies the batch into [:batch]",
        "engine",
        _edited(
            "capture_set",
            "static = [buffer[:size] for buffer in self._buffers]",
            "shift = int(size == self.sizes[-1])\n"
            "        static = [buffer[shift : size + shift] for buffer in self._buffers]",
        ),
    ),
    "capture_set_output_unsliced": (
        "the capture set returns a padded batch's outputs at the captured size, padding rows "
        "included, not sliced back to the batch",
        "engine",
        _edited("capture_set", "lambda out: out[:batch]", "lambda out: out"),
    ),
    "capture_set_padding_skipped": (
        "the capture set leaves the rows past a batch as the last call left them, unpadded",
        "engine",
        _edited(
            "capture_set",
            "        for pad in padding:\n            pad.fill_(self.pad_value)\n",
            "",
        ),
    ),
    "capture_set_pads_since_its_last_call": (
        "each captured size pads only the rows its own last call wrote past the batch, as if "
        "no call of another size wrote the rows beyond them",
        "engine",
        _edited(
            "capture_set",
            "        for pad in padding:\n            pad.fill_(self.pad_value)\n",
            "        written = getattr(captured, 'last_batch', captured.size)\n"
            "        for pad in padding:\n"
            "            pad[: max(0, written - batch)].fill_(self.pad_value)\n"
            "        captured.last_batch = batch\n",
        ),
    ),
    "capture_set_pads_with_zero": (
        "the capture set pads rows past the batch with 0, whatever pad value it was given",
        "engine",
        _edited("capture_set", "pad.fill_(self.pad_value)", "pad.fill_(0)"),
    ),
    "capture_set_copy_skipped_for_the_same_inputs": (
        "the capture set skips copying a batch in when its inputs lie where the last call's did, "
        "as if the batch were already in: a caller that rewrites its buffers in place replays "
        "the last batch",
        "engine",
        _edited(
            "capture_set",
            "        for buffer, x in zip(static, inputs):\n"
            "            if buffer.data_ptr() != x.data_ptr():\n"
            "                buffer.copy_(x)\n",
            "        seen = tuple(x.data_ptr() for x in inputs)\n"
            "        if seen != getattr(self, '_last_copied', None):\n"
            "            for buffer, x in zip(static, inputs):\n"
            "                if buffer.data_ptr() != x.data_ptr():\n"
            "                    buffer.copy_(x)\n"
            "        self._last_copied = seen\n",
        ),
    ),
    "runner_signature_without_batch": (
        "the runner's signature leaves out each tensor's first dimension, the batch: a call at "
        "another batch size replays the capture of the first",
        "engine",
        _edited(
            "runner",
            'return ("tensor", tuple(tree.shape), tree.dtype, tree.device, tuple(tree.stride()))',
            'return ("tensor", tuple(tree.shape[1:]), tree.dtype, tree.device, '
            "tuple(tree.stride()[1:]))",
        ),
    ),
    "capture_set_pool_per_size": (
        "the capture set captures each size into a new pool of its own",
        "engine",
        _edited(
            "capture_set",
            "        entry = self._runner._capture_entry(",
            "        self._runner.pool = torch.cuda.graph_pool_handle()\n"
            "        entry = self._runner._capture_entry(",
        ),
    ),
    "shared_executable_owner_never_switched_back": (
        "a shared executable launches its first capture's segment without switching back to "
        "it, as if it still held that capture's parameters after another size's replay",
        "pool",
        _edited(
            "executables",
            *_SHARING_ON,
            "if self.current is graph or self._update(graph):",
            "if graph is owner or self.current is graph or self._update(graph):",
        ),
    ),
    "shared_executable_across_kernels": (
        "segments are grouped by their position alone, not their kernel functions, and a "
        "refused cudaGraphExecUpdate is taken as done: a capture whose segment launches other "
        "kernels replays another capture's segment there",
        "pool",
        _edited(
            "executables",
            *_SHARING_ON,
            "    return tuple(functions)",
            "    return ()",
            "        if err != cudart.cudaError_t.cudaSuccess:\n            return False\n"
            "        self.current = graph",
            "        self.current = graph",
        ),
    ),
    "capture_holds_itself": (
        "the capture keeps a bound method of its own, a reference cycle: dropped with the "
        "cyclic collector frozen, as engines keep it, its graphs and memory are never freed",
        "pool",
        _capture_holds_itself,
    ),
    "reentry_returns_self": (
        "a capture entered again while it is open in this thread returns itself instead of "
        "refusing, so the inner with block's exit ends the outer capture",
        "nested",
        _edited(
            "capture",
            "        if thread_state.active_capture() is not None:\n",
            "        if thread_state.active_capture() is self:\n            return self\n"
            "        if thread_state.active_capture() is not None:\n",
        ),
    ),
}
NOT_BUGS: dict[str, Callable[[ModuleType], None]] = {"strong_arguments": _strong_arguments}
# Variants judged by another contract than the library's own.
CONTRACTS: dict[str, str] = {"global_active_capture_under_out_buffer": "out-buffer"}


def build(variant: str | None = None) -> SimpleNamespace:
    """The library copy with ``variant`` planted (``None``: an unmodified copy)."""
    plants = {name: plant for name, (_, _, plant) in BUGS.items()} | NOT_BUGS
    if variant is not None and variant not in plants:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(plants)}")
    lib = _copy(variant or "clean")
    if variant is not None and not getattr(lib, "_planted", False):
        plants[variant](lib)
        lib._planted = True
    return library_target(
        lib, "property", "property_targets", variant, CONTRACTS.get(variant or "", "returns")
    )
