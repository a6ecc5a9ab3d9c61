"""A break decorated before bisect imports the model that uses it: the tests import this module
first, so bisect cannot wrap its break and must say so rather than misread the capture."""

from __future__ import annotations

import torch

import breakable_cudagraph as bcg


@bcg.eager_break_during_capture
def early_rms(x: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
