"""The causal depthwise conv1d of the Gated DeltaNet layers, followed by SiLU.

Each of the conv_dim = 6144 channels of in_proj_qkv's output (q, k and v; not z, a, b) is convolved over
time with its own 4-tap filter, causally: the output at token t sees inputs t-3 .. t, with weight[:, 3]
on the current token and zeros before the sequence start. Decode keeps the last K = 4 inputs as the
conv state, [channels, K] with the newest column last (transformers keeps 4 columns; only the last 3
are ever read, which a ring buffer of K-1 could exploit).
`conv1d_l2norm_prefill` / `conv1d_l2norm_decode`, the references of the fused conv slots, continue the
model's chain after the conv: split into q | k | v, reshape into heads, L2 norm of q and k (q scaled).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .deltanet import l2norm_qk
from .precision import acc, expect, shape_str


def conv1d_prefill(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor | None = None, *,
                   match_hf_rounding: bool = False):
    """Causal depthwise conv over T tokens, then SiLU; returns the new conv state too.

    x:          [T, C] float, in_proj_qkv's output, tokens first
    weight:     [C, K] float (the checkpoint's conv1d.weight [C, 1, K] squeezed)
    conv_state: [C, K] the previous K inputs (newest last), or None at the start of a sequence (zeros)
    match_hf_rounding: compute as transformers' torch path does (see `_conv1d_hf`): the reference model
                in bf16/fp16 sets it.
    returns y [T, C] = silu(conv) in x's dtype (computed in fp32, fp64 for fp64), and the new state
    [C, K] in x's dtype: the last K inputs of cat(state, x).
    """
    T, C = x.shape
    expect(weight.dim() == 2 and weight.shape[0] == C,
           f"weight has shape {shape_str(weight)}; expected [{C}, K] for x of shape {shape_str(x)}")
    K = weight.shape[1]
    if conv_state is not None:
        expect(conv_state.shape == (C, K), f"conv_state has shape {shape_str(conv_state)}; expected [{C}, {K}]")
    if match_hf_rounding:
        return _conv1d_hf(x, weight, conv_state, decode=False)
    if conv_state is None:
        conv_state = x.new_zeros(C, K)
    buf = torch.cat([conv_state.T.to(x.dtype), x], dim=0)         # [K + T, C]: history, then the new tokens
    windows = acc(buf[1:]).unfold(0, K, 1)                        # [T, C, K]: inputs t-K+1 .. t per token
    y = F.silu((windows * acc(weight)).sum(-1))                   # [T, C]
    return y.to(x.dtype), buf[-K:].T.contiguous()                 # state: [C, K]


def conv1d_decode(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor, *,
                  match_hf_rounding: bool = False):
    """One decode step of the conv: roll the state by one column, convolve, SiLU.

    x:          [1, C] float, the new token's in_proj_qkv output
    weight:     [C, K]
    conv_state: [C, K], the previous K inputs (not modified)
    match_hf_rounding: as in `conv1d_prefill`
    returns y [1, C] in x's dtype and the new state [C, K] = (state without its oldest column, x).
    """
    expect(x.dim() == 2 and x.shape[0] == 1, f"x must be [1, C] (one token), got {shape_str(x)}")
    if match_hf_rounding:
        expect(conv_state.shape == (x.shape[1], weight.shape[1]) and weight.shape[0] == x.shape[1],
               f"conv_state {shape_str(conv_state)} and weight {shape_str(weight)} must both be "
               f"[{x.shape[1]}, K]")
        return _conv1d_hf(x, weight, conv_state, decode=True)
    return conv1d_prefill(x, weight, conv_state)


def _conv1d_hf(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor | None, decode: bool):
    """The conv as transformers' torch fallbacks (`causal_conv1d_fn`, `causal_conv1d_update`) compute it:
    `F.conv1d` in the weight's dtype over channels first [1, C, L], then SiLU, so that in bf16 the conv's
    output is rounded to bf16 before the SiLU (`conv1d_prefill` rounds once, after it); and with the same
    inputs, padding and lengths, so that the same conv kernel runs and the results agree bit for bit:
      - no state (a sequence's first tokens): the tokens (left-padded to K if fewer), conv with K-1 zeros
        of padding, the last T outputs;
      - a state and several tokens: cat(state, tokens), conv with K-1 zeros of padding, the last T outputs;
      - a state and one token (decode): cat(state, token), conv without padding, the last output.
    Same arguments and results as `conv1d_prefill`.
    """
    T, C = x.shape
    K = weight.shape[1]
    xs = x.T[None]                                                # [1, C, T], channels first (a view)
    if conv_state is None:
        full = xs if T >= K else F.pad(xs, (K - T, 0))            # [1, C, max(T, K)]
    else:
        full = torch.cat([conv_state.to(x.dtype)[None], xs], dim=-1)   # [1, C, K + T]
    y = F.conv1d(full.to(weight.dtype), weight[:, None], padding=0 if decode else K - 1, groups=C)
    y = F.silu(y[..., :full.shape[-1]][..., -T:]).to(x.dtype)     # [1, C, T]
    return y[0].T.contiguous(), full[0, :, -K:].contiguous()      # y [T, C], state [C, K]


# --- the fused conv slots: conv1d, then the split into heads and the L2 norm ------------------------------
# Exactly the unfused chain of the model, so the fused kernels are judged by the same math.
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
