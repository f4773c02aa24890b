"""References of the fusion variants that work on the engine's stacked gate/up weight [W_gate; W_up]."""
from __future__ import annotations

import torch

from .linear import linear
from .norms import rms_norm
from .swiglu_extra import swiglu_merged


def gate_up_swiglu_merged(x: torch.Tensor, gate_up_weight: torch.Tensor) -> torch.Tensor:
    """`silu(gate) * up` with [gate | up] = x @ gate_up_weight.T.

    x: [T, hidden]; gate_up_weight: [2 * I, hidden] (W_gate stacked over W_up); returns [T, I].
    """
    return swiglu_merged(linear(x, gate_up_weight))


def rms_norm_gate_up_swiglu(x: torch.Tensor, norm_weight: torch.Tensor, gate_up_weight: torch.Tensor,
                            eps: float = 1e-6) -> torch.Tensor:
    """ln2, the merged gate/up projection and SwiGLU: `gate_up_swiglu_merged(rms_norm(x), gate_up_weight)`.

    x: [T, hidden] (the residual stream h); norm_weight: [hidden] (zero-centred);
    gate_up_weight: [2 * I, hidden]; returns [T, I].
    """
    return gate_up_swiglu_merged(rms_norm(x, norm_weight, eps), gate_up_weight)


def linear_residual(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """A projection and the residual add after it: `residual + x @ weight.T`, summed in fp32 and rounded
    once to the stream's dtype (the fused kernel's rounding; the unfused pair rounds `x @ weight.T` to x's
    dtype first).

    x: [T, K] (o_proj / out_proj / down input); weight: [N, K]; residual: [T, N], the stream (model dtype,
    fp32 in fp16 mode); returns [T, N] in residual's dtype.
    """
    return (residual.float() + linear(x.float(), weight.float())).to(residual.dtype)
