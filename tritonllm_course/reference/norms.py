"""The three normalisations of Qwen3.5 (operators 14 and 15, and what the model adds).

- `rms_norm`: zero-centred RMSNorm `x / rms(x) * (1 + w)`, fp32 statistics. The weight is stored as an
  offset from 1 (initialised to 0), so a plain `* w` would scale everything by ~0. Used for both layer
  norms, the final norm, and (per head) q_norm / k_norm.
- `gated_rms_norm`: the DeltaNet output norm `norm(o) * w * silu(z)` with a plain weight (init 1).
- `l2norm` (in deltanet.py) is the third.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .precision import acc, expect, shape_str


def _normalise(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) over the last dim, in the accumulation dtype."""
    x = acc(x)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Zero-centred RMSNorm over the last dim: `(x / rms(x)) * (1 + weight)`.

    x:      [..., D] float (rows of the residual stream, [T, 1024] in the model)
    weight: [D] float, the offset from 1
    The statistics and the multiply by (1 + w) are done in fp32 (fp64 for fp64 input) and rounded once
    to x's dtype at the end, as transformers' Qwen3_5RMSNorm does.
    """
    expect(weight.shape == x.shape[-1:], f"weight has shape {shape_str(weight)}; expected "
           f"[{x.shape[-1]}] for x of shape {shape_str(x)}")
    return (_normalise(x, eps) * (1.0 + acc(weight))).to(x.dtype)


def qk_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Per-head zero-centred RMSNorm of attention queries or keys, before RoPE.

    x:      [T, heads, head_dim] float (q: [T, 8, 256], k: [T, 2, 256])
    weight: [head_dim], shared by all heads (q_norm.weight or k_norm.weight)
    returns [T, heads, head_dim] in x's dtype.
    """
    expect(x.dim() == 3, f"x must be [T, heads, head_dim], got {shape_str(x)}")
    return rms_norm(x, weight, eps)


def gated_rms_norm(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """DeltaNet output norm: `(x / rms(x)) * weight * silu(z)`, per value head.

    x:      [..., Dv] float, the delta-rule output ([T, 16, 128] in the model)
    z:      same shape as x, the output gate (in_proj_z)
    weight: [Dv], a plain scale (initialised to 1, not an offset; fp32 in the checkpoint)
    returns x's shape and dtype. The norm runs in fp32 and is rounded to x's dtype before the weight
    multiply; the gate is applied in fp32 (transformers' Qwen3_5RMSNormGated: norm before gate).
    """
    expect(z.shape == x.shape, f"z has shape {shape_str(z)}; expected the shape of x {shape_str(x)}")
    expect(weight.shape == x.shape[-1:], f"weight has shape {shape_str(weight)}; expected [{x.shape[-1]}]")
    h = weight * _normalise(x, eps).to(x.dtype)
    return (h * F.silu(acc(z))).to(x.dtype)
