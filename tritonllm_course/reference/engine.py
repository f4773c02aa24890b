"""Reference of the engine's own slot: the decode step's counters advanced by one."""
from __future__ import annotations

import torch

from .precision import expect, shape_str


def advance_positions(steps: torch.Tensor) -> torch.Tensor:
    """`steps + 1`: the next decode step's [position, cache length, sampling seed].

    steps: [n] int tensor; returns a new tensor of the same shape and dtype (the kernel updates in place).
    """
    expect(steps.dim() == 1 and not steps.is_floating_point(),
           f"steps must be a 1-D integer tensor, got {shape_str(steps)} {steps.dtype}")
    return steps + 1
