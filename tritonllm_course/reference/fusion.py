"""References of the fusion slots: exactly the unfused chain, so a fused kernel is judged by the same math."""
from __future__ import annotations

import torch

from .linear import linear
from .mlp import mlp_gate_up, swiglu
from .norms import rms_norm


def vector_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The course's first kernel: `x + y`. x, y: [N] float, same dtype."""
    return x + y


def rms_norm_linear(x: torch.Tensor, norm_weight: torch.Tensor, weight: torch.Tensor,
                    eps: float = 1e-6) -> torch.Tensor:
    """`linear(rms_norm(x, norm_weight), weight)`: ln1 + qkv_proj, ln2 + gate/up in one kernel.

    x: [T, hidden]; norm_weight: [hidden] (zero-centred); weight: [N, hidden]; returns [T, N].
    """
    return linear(rms_norm(x, norm_weight, eps), weight)


def gate_up_swiglu(x: torch.Tensor, gate_weight: torch.Tensor, up_weight: torch.Tensor) -> torch.Tensor:
    """`silu(x @ Wg.T) * (x @ Wu.T)`: the MLP's first half. x: [T, hidden]; weights [I, hidden]; returns [T, I]."""
    return swiglu(*mlp_gate_up(x, gate_weight, up_weight))
