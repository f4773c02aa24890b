"""The SwiGLU MLP (operators 10, 11, 12): `down( silu(gate(x)) * up(x) )`, 1024 -> 3584 -> 1024.

SwiGLU comes in two layouts: gate and up apart (`swiglu`), or side by side in the output of the merged
gate/up projection, one GEMV over [W_gate; W_up] giving [T, 2 * I] = [gate | up] (`swiglu_merged`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .linear import linear
from .precision import expect, shape_str


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """`silu(gate) * up`, elementwise in the input dtype (as transformers does).

    gate, up: [..., I] float, same shape
    """
    expect(gate.shape == up.shape, f"gate {shape_str(gate)} and up {shape_str(up)} must have one shape")
    return F.silu(gate) * up


def swiglu_merged(gate_up: torch.Tensor) -> torch.Tensor:
    """`silu(gate) * up` with gate, up = the two halves of the last dim.

    gate_up: [..., 2 * I] float
    returns [..., I] in gate_up's dtype.
    """
    expect(gate_up.shape[-1] % 2 == 0, f"gate_up {shape_str(gate_up)}: the last dim must be even (2 * I)")
    gate, up = gate_up.chunk(2, dim=-1)                              # [..., I] each
    return swiglu(gate, up)


def gate_up(x: torch.Tensor, gate_weight: torch.Tensor, up_weight: torch.Tensor):
    """The MLP's two input projections. x: [T, hidden]; weights [I, hidden]; returns gate, up [T, I]."""
    return linear(x, gate_weight), linear(x, up_weight)


def mlp(x: torch.Tensor, gate_weight: torch.Tensor, up_weight: torch.Tensor,
        down_weight: torch.Tensor) -> torch.Tensor:
    """The whole MLP. x: [T, hidden]; gate/up [I, hidden]; down [hidden, I]; returns [T, hidden]."""
    return linear(swiglu(*gate_up(x, gate_weight, up_weight)), down_weight)
