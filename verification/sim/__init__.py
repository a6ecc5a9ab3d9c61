"""A CUDA graph simulator: ``torch.cuda`` capture/replay semantics on CPU tensors.

Inside ``with simulated_cuda():`` the parts of ``torch.cuda`` that graph capture uses
(graphs, pools, streams, events, sync, memory stats, RNG seeding) behave like CUDA on
CPU tensors, reproducing its traps: capture records instead of executing, freed memory
is poisoned and reused, capture-illegal calls raise and invalidate, unjoined forks fail.

Not modelled: kernel timing, true concurrency between streams (work runs in issue
order), cuBLAS workspaces, cuSOLVER (refused in a capture until it ran eagerly, with the
H200's error), NCCL, multiple devices.
"""

from verification.sim.allocator import DEFAULT_POOL_ID, POISON_INT16
from verification.sim.capture_rules import strict_warmup
from verification.sim.patching import is_active, simulated_cuda
from verification.sim.races import StreamRaceError, detect_races

__all__ = [
    "DEFAULT_POOL_ID",
    "POISON_INT16",
    "StreamRaceError",
    "detect_races",
    "is_active",
    "simulated_cuda",
    "strict_warmup",
]
