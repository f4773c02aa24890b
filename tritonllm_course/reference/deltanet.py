"""The small DeltaNet operators around the delta rule: the gates and the L2 norm of q and k."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .precision import acc, expect, shape_str


def deltanet_gates(b: torch.Tensor, a: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor):
    """The write strength beta and the log-decay g of every (token, value head).

    b, a:    [T, value_heads] float, from in_proj_b and in_proj_a
    A_log:   [value_heads] (fp32 in the checkpoint); dt_bias: [value_heads]
    returns beta = sigmoid(b) in b's dtype, and g = -exp(A_log) * softplus(a + dt_bias) in fp32
    (fp64 for fp64): g <= 0 is a log-decay, exp(g) in (0, 1] multiplies the state every token; it stays in
    fp32 because a chunk sums 64 of them and exponentiates the differences.
    """
    expect(b.shape == a.shape, f"b {shape_str(b)} and a {shape_str(a)} must have one shape")
    expect(A_log.shape == a.shape[-1:] and dt_bias.shape == a.shape[-1:],
           f"A_log {shape_str(A_log)} and dt_bias {shape_str(dt_bias)} must be [{a.shape[-1]}]")
    g = -acc(A_log).exp() * F.softplus(acc(a) + acc(dt_bias))
    return torch.sigmoid(b), g


def l2norm(x: torch.Tensor, eps: float = 1e-6, scale: float = 1.0) -> torch.Tensor:
    """`x / sqrt(sum(x^2) + eps) * scale` over the last dim, computed in fp32 (fp64 for fp64).

    x: [..., D] float; returns x's shape and dtype.
    """
    xf = acc(x)
    return (xf * torch.rsqrt((xf * xf).sum(-1, keepdim=True) + eps) * scale).to(x.dtype)


def l2norm_qk(q: torch.Tensor, k: torch.Tensor, eps: float = 1e-6):
    """DeltaNet q and k: unit length per head, and q also scaled by head_dim^-0.5.

    q, k: [T, key_heads, key_head_dim] float
    returns (q / |q| * key_head_dim^-0.5, k / |k|) in the input dtypes.
    """
    expect(q.shape == k.shape, f"q {shape_str(q)} and k {shape_str(k)} must have one shape")
    return l2norm(q, eps, q.shape[-1] ** -0.5), l2norm(k, eps)
