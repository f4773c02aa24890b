"""Projections (operators 2, 8, 10, 12): `y = x @ W.T`, no bias anywhere in Qwen3.5.

Weights are stored [out_features, in_features] (PyTorch's nn.Linear layout), so a row of W is one output.
The matmul runs in the input dtype (bf16 on the GPU, with fp32 accumulation inside cuBLAS), as in
transformers.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .precision import expect, shape_str


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`x @ weight.T`.

    x:      [..., K] float
    weight: [N, K] float, same dtype as x
    returns [..., N] in x's dtype.
    """
    expect(weight.dim() == 2 and weight.shape[1] == x.shape[-1],
           f"weight has shape {shape_str(weight)}; expected [N, {x.shape[-1]}] for x of shape {shape_str(x)}")
    return F.linear(x, weight)


def split_query_gate(qg: torch.Tensor, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Split the attention q_proj output into the query and the output gate.

    The rows of q_proj are interleaved per head: head h owns [512h, 512h+256) = query and
    [512h+256, 512h+512) = gate (at head_dim 256), not [all queries | all gates].
    qg: [T, heads * 2 * head_dim]
    returns q [T, heads, head_dim] and gate [T, heads * head_dim] (flat, as it multiplies o before o_proj).
    """
    T, width = qg.shape
    expect(width % (2 * head_dim) == 0, f"q_proj output width {width} is not a multiple of 2 x head_dim")
    per_head = qg.view(T, -1, 2 * head_dim)                     # [T, heads, 2 * head_dim]
    q, gate = per_head.split(head_dim, dim=-1)                   # [T, heads, head_dim] each
    return q, gate.reshape(T, -1)                                # gate: [T, heads * head_dim]


def attention_qkv_proj(x: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                       v_weight: torch.Tensor, head_dim: int):
    """The gated-attention input projections (operator 2, attention layers).

    x:        [T, hidden]
    q_weight: [heads * 2 * head_dim, hidden] (query and gate interleaved per head)
    k_weight, v_weight: [kv_heads * head_dim, hidden]
    returns q [T, heads, head_dim], gate [T, heads * head_dim], k and v [T, kv_heads, head_dim].
    """
    T = x.shape[0]
    q, gate = split_query_gate(linear(x, q_weight), head_dim)
    k = linear(x, k_weight).view(T, -1, head_dim)                # [T, kv_heads, head_dim]
    v = linear(x, v_weight).view(T, -1, head_dim)                # [T, kv_heads, head_dim]
    return q, gate, k, v


def deltanet_in_proj(x: torch.Tensor, qkv_weight: torch.Tensor, z_weight: torch.Tensor,
                     b_weight: torch.Tensor, a_weight: torch.Tensor):
    """The Gated DeltaNet input projections (operator 2, DeltaNet layers): four matrices.

    x:          [T, hidden]
    qkv_weight: [2 * key_dim + value_dim, hidden], rows [q | k | v], each head-major
    z_weight:   [value_dim, hidden] (output gate);  b_weight, a_weight: [value_heads, hidden]
    returns qkv [T, conv_dim] (still mixed: the conv runs on it before the split), z [T, value_dim],
    b [T, value_heads] (beta logits), a [T, value_heads] (decay input).
    """
    return linear(x, qkv_weight), linear(x, z_weight), linear(x, b_weight), linear(x, a_weight)
