"""The gated delta rule: the DeltaNet layers' memory, two ways.

Per value head, a state S [key_dim, value_dim] (fp32) is updated for every token t:
    S   = exp(g_t) * S                   decay first
    u   = beta_t * (v_t - S^T k_t)       the error of the memory's prediction for k_t
    S   = S + k_t u^T                    rank-1 write
    o_t = S^T q_t                        read with the UPDATED state
q and k arrive L2-normalised (q also scaled by key_dim^-0.5: see `l2norm_qk`). With more value heads
than key heads, value head j uses key head j // (value_heads / key_heads).

`gated_delta_rule_recurrent` is that loop (decode: T = 1). `gated_delta_rule_chunked` computes the same
thing 64 tokens at a time with matrix products (prefill); the two must agree.
"""
from __future__ import annotations

import torch

from .precision import acc_dtype, expect, shape_str


def _prepare(q, k, v, g, beta, initial_state):
    """Validate, expand key heads to value heads, upcast; returns q, k, v, g, beta, S0 in the acc dtype."""
    expect(q.dim() == 3 and q.shape == k.shape, f"q {shape_str(q)} and k {shape_str(k)} must both be "
           "[T, key_heads, key_dim]")
    T, H, Dk = q.shape
    expect(v.dim() == 3 and v.shape[0] == T, f"v has shape {shape_str(v)}; expected [{T}, value_heads, value_dim]")
    HV, Dv = v.shape[1:]
    expect(HV % H == 0, f"{HV} value heads are not a multiple of {H} key heads")
    expect(g.shape == (T, HV) and beta.shape == (T, HV),
           f"g {shape_str(g)} and beta {shape_str(beta)} must be [{T}, {HV}]")
    work = acc_dtype(v.dtype)
    if initial_state is None:
        initial_state = torch.zeros(HV, Dk, Dv, dtype=work, device=v.device)
    expect(initial_state.shape == (HV, Dk, Dv),
           f"initial_state has shape {shape_str(initial_state)}; expected [{HV}, {Dk}, {Dv}]")
    q, k = (x.to(work).repeat_interleave(HV // H, dim=1) for x in (q, k))   # [T, HV, Dk]
    return q, k, v.to(work), g.to(work), beta.to(work), initial_state.to(work).clone()


def gated_delta_rule_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                               beta: torch.Tensor, initial_state: torch.Tensor | None = None, *,
                               match_hf_rounding: bool = False):
    """The delta rule one token at a time.

    q, k:          [T, key_heads, key_dim] float, L2-normalised (q scaled)
    v:             [T, value_heads, value_dim] float
    g:             [T, value_heads] log-decay (<= 0), fp32;  beta: [T, value_heads]
    initial_state: [value_heads, key_dim, value_dim] or None (zeros); not modified
    match_hf_rounding: the products S^T k and S^T q as transformers' torch fallback writes them
                   (elementwise product, then a sum), so that its fp32 results are reproduced bit for
                   bit (the reference model in bf16/fp16 sets it); the same values up to fp32 rounding.
    returns o [T, value_heads, value_dim] in v's dtype and the final state [value_heads, key_dim,
    value_dim] in fp32 (fp64 when v is fp64). All arithmetic in that dtype.
    """
    q, k, vf, g, beta, S = _prepare(q, k, v, g, beta, initial_state)
    if match_hf_rounding:
        def read(x, S):                                           # S^T x: [HV, Dv]
            return (S * x[:, :, None]).sum(-2)
    else:
        def read(x, S):
            return torch.einsum("hk,hkv->hv", x, S)
    o = torch.empty_like(vf)                                      # [T, HV, Dv]
    for t in range(q.shape[0]):
        S = S * g[t].exp()[:, None, None]                         # [HV, Dk, Dv]
        prediction = read(k[t], S)                                # S^T k: [HV, Dv]
        u = beta[t][:, None] * (vf[t] - prediction)               # [HV, Dv]
        S = S + k[t][:, :, None] * u[:, None, :]                  # k u^T
        o[t] = read(q[t], S)                                      # S^T q
    return o.to(v.dtype), S


def gated_delta_rule_chunked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                             beta: torch.Tensor, initial_state: torch.Tensor | None = None,
                             chunk_size: int = 64, *, match_hf_rounding: bool = False):
    """The delta rule in chunks of `chunk_size` tokens: the same result as the recurrence, with matmuls.

    Same arguments and results as `gated_delta_rule_recurrent`. Per chunk with start state S0, with
    gamma_i = g_1 + ... + g_i (cumulative log-decay inside the chunk) and Gamma_ij = exp(gamma_i - gamma_j):
        A  = strictly_lower((beta * K) K^T * Gamma)      how earlier writes in the chunk disturb row i
        U  = (I + A)^-1 (beta * V)                       UT transform: the WY "new values"
        W  = (I + A)^-1 (beta * exp(gamma) * K)          and the WY keys
        Vn = U - W S0                                    values corrected for what S0 predicts
        O  = (Q * exp(gamma)) S0 + (lower_incl(Q K^T) * Gamma) Vn
        S1 = exp(gamma_C) S0 + (K * exp(gamma_C - gamma))^T Vn
    Padding the sequence to a multiple of the chunk with zeros (g = 0, beta = 0) changes nothing.
    match_hf_rounding: transformers' torch fallback's triangular system (A with its diagonal, declared
    unit-triangular, rather than I + A) and its contiguous chunks, so that the same fp32 operations run
    and its results are reproduced bit for bit (the reference model in bf16/fp16 sets it); the same
    values up to fp32 rounding.
    """
    q, k, vf, g, beta, S = _prepare(q, k, v, g, beta, initial_state)
    T, HV, Dv = vf.shape
    C = chunk_size
    pad = (-T) % C
    N = (T + pad) // C

    def chunks(x):  # [T, HV, ...] -> [HV, N, C, ...], zero-padded
        x = torch.cat([x, x.new_zeros(pad, *x.shape[1:])])        # [N * C, HV, ...]
        x = x.reshape(N, C, *x.shape[1:]).transpose(0, 2).transpose(1, 2)
        return x.contiguous() if match_hf_rounding else x         # transformers' layout: the same GEMMs

    q, k, vf = chunks(q), chunks(k), chunks(vf)                   # [HV, N, C, D]
    g, beta = chunks(g), chunks(beta)                             # [HV, N, C]

    gamma = g.cumsum(-1)                                          # [HV, N, C]
    lower = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    diff = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(~lower, float("-inf"))
    Gamma = diff.exp()                                            # [HV, N, C, C], 0 above the diagonal
    k_beta = k * beta[..., None]                                  # [HV, N, C, Dk]
    A = k_beta @ k.transpose(-1, -2) * Gamma                      # [HV, N, C, C], lower incl. diagonal
    if match_hf_rounding:                                         # the diagonal is ignored, taken as 1
        I_plus_A, unit = A, True
    else:
        I_plus_A, unit = A.tril(-1) + torch.eye(C, dtype=A.dtype, device=A.device), False
    U = torch.linalg.solve_triangular(I_plus_A, vf * beta[..., None], upper=False,
                                      unitriangular=unit)                           # [HV, N, C, Dv]
    W = torch.linalg.solve_triangular(I_plus_A, k_beta * gamma.exp()[..., None], upper=False,
                                      unitriangular=unit)                           # [HV, N, C, Dk]
    QK = (q @ k.transpose(-1, -2)) * Gamma                        # [HV, N, C, C], lower incl. diagonal

    o = torch.empty_like(vf)                                      # [HV, N, C, Dv]
    for n in range(N):
        Vn = U[:, n] - W[:, n] @ S                                # [HV, C, Dv]
        o[:, n] = (q[:, n] * gamma[:, n, :, None].exp()) @ S + QK[:, n] @ Vn
        last = gamma[:, n, -1]                                    # [HV]
        k_decayed = k[:, n] * (last[:, None] - gamma[:, n]).exp()[..., None]  # [HV, C, Dk]
        S = S * last.exp()[:, None, None] + k_decayed.transpose(-1, -2) @ Vn
    o = o.reshape(HV, N * C, Dv)[:, :T].transpose(0, 1)           # [T, HV, Dv]
    return o.to(v.dtype), S
