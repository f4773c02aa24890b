"""The causal depthwise conv1d of the Gated DeltaNet layers, followed by SiLU.

Each of the conv_dim = 6144 channels of in_proj_qkv's output (q, k and v; not z, a, b) is convolved over
time with its own 4-tap filter, causally: the output at token t sees inputs t-3 .. t, with weight[:, 3]
on the current token and zeros before the sequence start. Decode keeps the last K = 4 inputs as the
conv state, [channels, K] with the newest column last (transformers keeps 4 columns; only the last 3
are ever read, which a ring buffer of K-1 could exploit).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .precision import acc, expect, shape_str


def conv1d_prefill(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor | None = None):
    """Causal depthwise conv over T tokens, then SiLU; returns the new conv state too.

    x:          [T, C] float, in_proj_qkv's output, tokens first
    weight:     [C, K] float (the checkpoint's conv1d.weight [C, 1, K] squeezed)
    conv_state: [C, K] the previous K inputs (newest last), or None at the start of a sequence (zeros)
    returns y [T, C] = silu(conv) in x's dtype (computed in fp32, fp64 for fp64), and the new state
    [C, K] in x's dtype: the last K inputs of cat(state, x).
    """
    T, C = x.shape
    expect(weight.dim() == 2 and weight.shape[0] == C,
           f"weight has shape {shape_str(weight)}; expected [{C}, K] for x of shape {shape_str(x)}")
    K = weight.shape[1]
    if conv_state is None:
        conv_state = x.new_zeros(C, K)
    expect(conv_state.shape == (C, K), f"conv_state has shape {shape_str(conv_state)}; expected [{C}, {K}]")
    buf = torch.cat([conv_state.T.to(x.dtype), x], dim=0)         # [K + T, C]: history, then the new tokens
    windows = acc(buf[1:]).unfold(0, K, 1)                        # [T, C, K]: inputs t-K+1 .. t per token
    y = F.silu((windows * acc(weight)).sum(-1))                   # [T, C]
    return y.to(x.dtype), buf[-K:].T.contiguous()                 # state: [C, K]


def conv1d_decode(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor):
    """One decode step of the conv: roll the state by one column, convolve, SiLU.

    x:          [1, C] float, the new token's in_proj_qkv output
    weight:     [C, K]
    conv_state: [C, K], the previous K inputs (not modified)
    returns y [1, C] in x's dtype and the new state [C, K] = (state without its oldest column, x).
    """
    expect(x.dim() == 2 and x.shape[0] == 1, f"x must be [1, C] (one token), got {shape_str(x)}")
    return conv1d_prefill(x, weight, conv_state)
