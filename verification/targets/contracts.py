"""Break contracts as data: what a break may do with its results, and so what a target owes.

``out-buffer`` is vLLM's: a break writes into tensors its caller provides and returns None
(or one of its arguments, unchanged); a fresh tensor it returns is not refreshed at replay.
``returns`` is this library's: returned tensors are refreshed at replay. ``sglang`` refreshes
returns too. ``no-device-returns`` is stricter than ``out-buffer``: a break returns no device
tensor at all (None, or host values), and a target that raises on one is right
(``breakable-cuda-graphs``, Meta's ``piecewise-cuda-graphs``). A contract also states what
the engine's caller guarantees (:data:`DUTIES`): vLLM's and SGLang's runners freeze the
collector around captures, capture from one thread at a time, and only from a stream of their
own (``graph_capture``'s), so the harness does the same for targets judged by them, and a
target's reliance on a duty is a note, not a bug. A target declares the duties it fulfils
itself (:data:`GUARDS`, e.g. ``GUARDS = ("collector",)``; ``GUARDS_ITSELF = True`` for all): the
harness does only the rest for it, and checks the declared ones as any other behaviour. A
target declares its contract with a module attribute
(:data:`DECLARATION`); undeclared targets are judged by ``out-buffer``, the contract of
upstream vLLM.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from verification.errors import UsageError

# What an engine's runner guarantees around its captures, as "relies on its caller to ...".
COLLECTOR = "collector"
ONE_CAPTURING_THREAD = "one-capturing-thread"
SIDE_STREAM = "side-stream"
DUTIES: dict[str, str] = {
    COLLECTOR: "freeze the collector around captures",
    ONE_CAPTURING_THREAD: "capture from one thread at a time",
    SIDE_STREAM: "capture from a stream of its own, never from the default stream",
}
# ``GUARDS = ("collector", "one-capturing-thread")``: the duties of :data:`DUTIES` the target
# fulfils itself, so that the harness leaves them to it (and a failure of one is its bug).
GUARDS = "GUARDS"
# ``GUARDS_ITSELF = True``: shorthand for every duty (this library).
GUARDS_ITSELF = "GUARDS_ITSELF"


@dataclass(frozen=True)
class Contract:
    """``refreshes_returns``: a tensor a break returns holds the new result after each replay.
    ``device_returns``: a break may return a device tensor at all (one of its arguments, at
    least); where not, programs drawn under the contract never make a break return one.
    ``caller_duties`` (of :data:`DUTIES`) are what ``caller`` (the engine's runner) does."""

    name: str
    refreshes_returns: bool
    summary: str
    caller_duties: tuple[str, ...] = ()
    caller: str = ""
    device_returns: bool = True

    def reliance_note(self, duty: str) -> str:
        return f"relies on its caller to {DUTIES[duty]}; {self.caller} does"


CONTRACTS: dict[str, Contract] = {
    c.name: c
    for c in (
        Contract(
            "out-buffer",
            refreshes_returns=False,
            summary="a break writes into caller-provided tensors and returns None or an "
            "argument unchanged; a fresh tensor it returns is not refreshed at replay (vLLM)",
            # gpu_model_runner.py: freeze_gc_for_cudagraph_capture, one capture loop, inside
            # graph_capture()'s stream.
            caller_duties=(COLLECTOR, ONE_CAPTURING_THREAD, SIDE_STREAM),
            caller="vLLM's runner",
        ),
        Contract(
            "returns",
            refreshes_returns=True,
            summary="a tensor a break returns is refreshed at every replay (breakable_cudagraph)",
        ),
        Contract(
            "no-device-returns",
            refreshes_returns=False,
            summary="a break writes into caller-provided tensors and returns no device tensor, "
            "not even an argument; a target may raise on one (breakable-cuda-graphs, "
            "piecewise-cuda-graphs)",
            device_returns=False,
        ),
        Contract(
            "sglang",
            refreshes_returns=True,
            summary="a tensor a break returns is refreshed at every replay, copied into the "
            "capture-time result (SGLang's _copy_output)",
            # base_cuda_graph_runner.py: freeze_gc around the capture loop, one runner thread,
            # inside graph_capture()'s stream.
            caller_duties=(COLLECTOR, ONE_CAPTURING_THREAD, SIDE_STREAM),
            caller="SGLang's runner",
        ),
    )
}

DEFAULT_CONTRACT = "out-buffer"
# The module attribute a target declares its contract with, e.g. BREAK_CONTRACT = "returns".
DECLARATION = "BREAK_CONTRACT"
# Older spelling (the breakable-cuda-graphs adapter): a bool, True meaning "returns".
LEGACY_DECLARATION = "SUPPORTS_TENSOR_RETURNS"


def get_contract(name: str | Contract) -> Contract:
    """The contract called ``name``; :class:`UsageError` naming the choices otherwise."""
    if isinstance(name, Contract):
        return name
    try:
        return CONTRACTS[name]
    except KeyError:
        raise UsageError(
            f"unknown contract {name!r}; choose one of {', '.join(CONTRACTS)}"
        ) from None


def declared_contract(module: Any) -> Contract:
    """The contract ``module`` declares, ``out-buffer`` when it declares none."""
    declared = getattr(module, DECLARATION, None)
    if declared is not None:
        return get_contract(declared)
    legacy = getattr(module, LEGACY_DECLARATION, None)
    if legacy is not None:
        return CONTRACTS["returns" if legacy else "out-buffer"]
    return CONTRACTS[DEFAULT_CONTRACT]


def guarded_duties(module: Any, name: str | None = None) -> tuple[str, ...]:
    """The duties ``module`` declares it fulfils itself (:data:`GUARDS`, or all of them under
    :data:`GUARDS_ITSELF`); :class:`UsageError` naming the duties for a name not among them
    (``name`` is the target's, for that message)."""
    if getattr(module, GUARDS_ITSELF, False) is True:
        return tuple(DUTIES)
    declared = getattr(module, GUARDS, ())
    names = (declared,) if isinstance(declared, str) else declared
    try:
        names = tuple(names)
    except TypeError:
        names = (declared,)
    where = "the target" if name is None else f"target {name!r}"
    for duty in names:
        if duty not in DUTIES:
            raise UsageError(
                f"{where} declares {GUARDS} with an unknown caller duty {duty!r}; the duties "
                f"are {', '.join(DUTIES)}"
            )
    return names


def caller_duties(module: Any, contract: Contract) -> tuple[str, ...]:
    """The duties the harness fulfils for ``module``: its contract's caller's, less those it
    guards itself."""
    guarded = guarded_duties(module)
    return tuple(duty for duty in contract.caller_duties if duty not in guarded)


@contextlib.contextmanager
def collector_frozen() -> Iterator[None]:
    """The collector duty as vLLM's runner fulfils it (``freeze_gc_for_cudagraph_capture``):
    collect, freeze every object alive and disable the collector, so that it frees nothing
    mid-capture; unfreeze, collect and restore after. SGLang's ``freeze_gc`` freezes without
    disabling, and its runner holds every graph it captured, so none becomes garbage
    mid-capture either; the checker applies the one stricter form to both."""
    was_on = gc.isenabled()
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if was_on:
            gc.enable()
        gc.collect()
