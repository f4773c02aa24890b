"""The SwiGLU of the merged gate/up projection: one GEMV over [W_gate; W_up] gives [T, 2 * I] = [gate | up]."""
from __future__ import annotations

import torch

from .mlp import swiglu
from .precision import expect, shape_str


def swiglu_merged(gate_up: torch.Tensor) -> torch.Tensor:
    """`silu(gate) * up` with gate, up = the two halves of the last dim.

    gate_up: [..., 2 * I] float
    returns [..., I] in gate_up's dtype.
    """
    expect(gate_up.shape[-1] % 2 == 0, f"gate_up {shape_str(gate_up)}: the last dim must be even (2 * I)")
    gate, up = gate_up.chunk(2, dim=-1)                              # [..., I] each
    return swiglu(gate, up)
