"""Residual adds (operators 9 and 13), and the add fused with the next norm."""
from __future__ import annotations

import torch

from .norms import rms_norm
from .precision import expect, shape_str


def residual_add(x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """`residual + x` in the model dtype (transformers adds in bf16 too).

    x, residual: [T, hidden] float, same shape and dtype
    """
    expect(x.shape == residual.shape, f"x {shape_str(x)} and residual {shape_str(residual)} differ in shape")
    return residual + x


def residual_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6):
    """Add, then zero-centred RMSNorm, in one pass over the residual stream.

    x, residual: [T, hidden]; weight: [hidden]
    returns (h = residual + x, rms_norm(h)): the new residual stream and the next sublayer's input.
    """
    h = residual_add(x, residual)
    return h, rms_norm(h, weight, eps)
