"""Operators 3 and 4: rotary position embedding, partial and rotate-half ("NeoX") style.

Qwen3.5 rotates only the first `rotary_dim` = 64 of the 256 dims of each head (partial_rotary_factor
0.25), with theta = 1e7, and pairs dim i with dim i + 32 ("rotate half"), not (2i, 2i+1) as GPT-J did.
Its mRoPE (3 position streams for time/height/width) reduces to plain 1-D RoPE for text, because all
three streams are the token index.
"""
from __future__ import annotations

import torch

from .precision import acc_dtype, expect, shape_str


def rope_cache(num_positions: int, rotary_dim: int, theta: float = 1e7, dtype=torch.float32,
               device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables for positions 0 .. num_positions-1.

    inv_freq[j] = theta^(-2j / rotary_dim), j < rotary_dim / 2; angle[p, j] = p * inv_freq[j].
    Both halves of a row hold the same angles (`cat(f, f)`), the layout rotate-half wants.
    Computed in fp32 (fp64 if dtype is fp64), then cast to `dtype`, as transformers casts them to
    the activation dtype.
    returns cos, sin: [num_positions, rotary_dim]
    """
    expect(rotary_dim % 2 == 0, f"rotary_dim must be even, got {rotary_dim}")
    work = acc_dtype(dtype)
    inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=work, device=device) / rotary_dim))
    angles = torch.arange(num_positions, dtype=work, device=device)[:, None] * inv_freq  # [P, r/2]
    angles = torch.cat([angles, angles], dim=-1)                                          # [P, r]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _rows(cos, sin, pos, x):
    expect(cos.shape == sin.shape and cos.dim() == 2, f"cos {shape_str(cos)} and sin {shape_str(sin)} "
           "must both be [positions, rotary_dim]")
    expect(cos.shape[1] <= x.shape[-1], f"rotary_dim {cos.shape[1]} exceeds head_dim {x.shape[-1]}")
    expect(pos.shape == x.shape[:1], f"pos has shape {shape_str(pos)}; expected [{x.shape[0]}] (one per token)")
    idx = pos.long()
    # [T, 1, r]: one row per token, broadcast over heads, in the activation dtype
    return cos[idx][:, None].to(x.dtype), sin[idx][:, None].to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dim."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on the first rotary_dim dims of every head; the rest pass through.

    x:        [T, heads, head_dim] float (q after q_norm, or k after k_norm)
    cos, sin: [max_positions, rotary_dim] tables from `rope_cache`
    pos:      [T] int, the absolute position of each token (read from device memory in decode)
    returns [T, heads, head_dim] in x's dtype; the arithmetic is in x's dtype, as in transformers.
    """
    c, s = _rows(cos, sin, pos, x)
    r = cos.shape[1]
    x_rot, x_pass = x[..., :r], x[..., r:]
    return torch.cat([x_rot * c + rotate_half(x_rot) * s, x_pass], dim=-1)


def apply_rope_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                           pos: torch.Tensor) -> torch.Tensor:
    """GPT-J style RoPE, rotating pairs (2i, 2i+1) by angle i: WRONG FOR QWEN, kept to show the difference.

    Same arguments as `apply_rope`. A checkpoint trained with rotate-half pairs (i, i + r/2); this variant
    gives each pair the right angle but the wrong partner, so attention scores drift and the model
    produces garbage while every shape still looks right.
    """
    c, s = _rows(cos, sin, pos, x)
    r = cos.shape[1]
    c, s = c[..., : r // 2], s[..., : r // 2]                    # [T, 1, r/2]: one angle per pair
    pairs = x[..., :r].unflatten(-1, (r // 2, 2))                # [T, heads, r/2, 2]
    even, odd = pairs[..., 0], pairs[..., 1]                     # [T, heads, r/2] each
    rotated = torch.stack([even * c - odd * s, odd * c + even * s], dim=-1)  # [T, heads, r/2, 2]
    return torch.cat([rotated.flatten(-2), x[..., r:]], dim=-1)  # [T, heads, head_dim]
