"""References of the fused DeltaNet conv slots: exactly the unfused chain of the model, so the fused
kernels are judged by the same math.

    conv1d (+ SiLU) -> split into q | k | v -> reshape into heads -> L2 norm of q and k (q scaled)
"""
from __future__ import annotations

import torch

from .conv1d import conv1d_decode, conv1d_prefill
from .deltanet import l2norm_qk
from .precision import acc, expect, shape_str


def _split_heads(y: torch.Tensor, key_heads: int, head_dim: int, value_head_dim: int, eps: float):
    """y [T, C] -> q, k [T, key_heads, head_dim] (L2-normalised, in the accumulation dtype), v [T, HV, Dv]."""
    T, C = y.shape
    key_dim = key_heads * head_dim
    expect(C > 2 * key_dim and (C - 2 * key_dim) % value_head_dim == 0,
           f"{C} channels do not split into q, k of {key_heads} x {head_dim} and whole value heads of "
           f"{value_head_dim}")
    q, k, v = y.split([key_dim, key_dim, C - 2 * key_dim], dim=-1)
    q = acc(q).reshape(T, key_heads, head_dim)                  # [T, H, D]
    k = acc(k).reshape(T, key_heads, head_dim)                  # [T, H, D]
    q, k = l2norm_qk(q, k, eps)
    return q, k, v.reshape(T, -1, value_head_dim)               # v: [T, HV, Dv]


def conv1d_l2norm_prefill(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor | None,
                          key_heads: int, head_dim: int, eps: float = 1e-6, value_head_dim: int | None = None):
    """`conv1d_prefill`, then the split and the L2 norm of q and k, as the model does them.

    x: [T, C] with C = 2 * key_heads * head_dim + value_heads * value_head_dim (default head_dim);
    weight, conv_state: [C, K]
    returns q, k [T, key_heads, head_dim] in fp32 (fp64 for fp64), v [T, value_heads, value_head_dim] in
    x's dtype, and the new conv state [C, K].
    """
    y, state = conv1d_prefill(x, weight, conv_state)
    return (*_split_heads(y, key_heads, head_dim, value_head_dim or head_dim, eps), state)


def conv1d_l2norm_decode(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor,
                         key_heads: int, head_dim: int, eps: float = 1e-6, value_head_dim: int | None = None):
    """`conv1d_decode` (x [1, C]), then the split and the L2 norm; returns q, k, v and the new state."""
    expect(x.dim() == 2 and x.shape[0] == 1, f"x must be [1, C] (one token), got {shape_str(x)}")
    y, state = conv1d_decode(x, weight, conv_state)
    return (*_split_heads(y, key_heads, head_dim, value_head_dim or head_dim, eps), state)
