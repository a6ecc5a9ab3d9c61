"""Break contracts as data: what a break may do with its results, and so what a target owes.

``out-buffer`` is vLLM's: a break writes into tensors its caller provides and returns None
(or one of its arguments, unchanged); a fresh tensor it returns is not refreshed at replay.
``returns`` is this library's: returned tensors are refreshed at replay. A target declares
its contract with a module attribute (:data:`DECLARATION`); undeclared targets are judged by
``out-buffer``, the contract of upstream vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verification.errors import UsageError


@dataclass(frozen=True)
class Contract:
    """``refreshes_returns``: a tensor a break returns holds the new result after each replay."""

    name: str
    refreshes_returns: bool
    summary: str


CONTRACTS: dict[str, Contract] = {
    c.name: c
    for c in (
        Contract(
            "out-buffer",
            refreshes_returns=False,
            summary="a break writes into caller-provided tensors and returns None or an "
            "argument unchanged; a fresh tensor it returns is not refreshed at replay (vLLM)",
        ),
        Contract(
            "returns",
            refreshes_returns=True,
            summary="a tensor a break returns is refreshed at every replay (breakable_cudagraph)",
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
