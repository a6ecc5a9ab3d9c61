"""Forwards whose op traces must be the same on the simulator as on CUDA: each uses a torch
entry point that CUDA torch implements in C++ and the simulator in Python (a dtype cast,
``cuda()``, ``torch.tensor`` on the device). Traced eagerly only: building a tensor from
host data cannot be captured."""

from __future__ import annotations

import torch

D = 16


def casts_and_constants():
    x = torch.randn(8, D, device="cuda")
    positions = torch.arange(8, device="cuda")
    host = torch.randn(8, D)

    def forward():
        pos = positions.to(torch.float32)  # CAST
        scale = torch.tensor([0.5], device="cuda")  # CONSTANT
        moved = host.cuda()  # MOVED
        str(scale)  # printing dispatches no op of the caller's on CUDA
        return (x + moved) * scale + pos[:, None]

    def next_step(step: int) -> None:
        pass

    return forward, next_step
