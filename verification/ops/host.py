"""Host values a program takes beside its tensors: the metadata an engine's runner prepares.

:data:`HOST_SOURCE` is standalone Python text defining ``HostMeta`` (a dataclass of a list of
sequence lengths, an int and a CPU tensor, like vLLM's attention metadata), ``make_host(count,
seed)`` and ``update_host(host, seed)``, which rewrites every field in place as a runner does
before each replay (the executor runs this text: :mod:`verification.execute`). :data:`HOST_FORMS` are the ways a break is given them (the dataclass, the
list alone, or inside a tuple or dict), each as an expression over ``host``. The harness and
reproducers execute this same text, so a reproducer sees the fuzzer's values.
"""

from __future__ import annotations

import functools
from typing import Any

HOST_SOURCE = '''
@dataclasses.dataclass
class HostMeta:
    """What the runner prepares on the host before every run (vLLM's attention metadata)."""

    seq_lens: list
    num_tokens: int
    positions: torch.Tensor  # on the CPU
    # Tensors the forward computes into the metadata inside the captured region (rotary
    # cos/sin of the positions), by step: the runner keeps them, the graph rewrites them.
    rotary: dict = dataclasses.field(default_factory=dict)


def make_host(count, seed):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, 9, (count,), generator=g).tolist()
    return HostMeta(lens, sum(lens), torch.randint(0, 8, (count,), generator=g))


def update_host(host, seed):
    """Rewrites every field in place, as a runner does before a replay."""
    new = make_host(len(host.seq_lens), seed)
    host.seq_lens[:] = new.seq_lens
    host.num_tokens = new.num_tokens
    host.positions.copy_(new.positions)
'''

# How a step hands the host values to its break: (name, expression over ``host``).
HOST_FORMS: dict[str, str] = {
    "meta": "host",
    "lens": "host.seq_lens",
    "tuple": "(host.seq_lens, host.positions)",
    "dict": '{"lens": host.seq_lens, "meta": host}',
}


@functools.cache
def _form_code(form: str) -> Any:
    return compile(HOST_FORMS[form], f"<host form {form}>", "eval")


def host_argument(form: str, host: Any) -> Any:
    """The value a break is given for ``form``; a fresh container per call, as in a runner."""
    return eval(_form_code(form), {"host": host})
