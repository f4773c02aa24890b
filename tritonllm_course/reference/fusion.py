"""References of the fused slots of chapters 21_norm_fusion and 22_layer_fusion: exactly the chains of reference ops
they replace, so a fused kernel is judged by the same math. Chapter 21_norm_fusion (solutions/norm_fusion.py): RMSNorm +
projection (+ the DeltaNet conv step), gate/up + SwiGLU (the stacked gate/up weight [W_gate; W_up] too, and ln2
before it); its residual + RMSNorm is `residual.residual_rms_norm`. Chapter 22_layer_fusion (solutions/layer_fusion.py):
the projection + residual add, the attention's q/k norm + RoPE + cache write, the DeltaNet gates +
recurrence (q and k normalised there or not), the gated RMSNorm + out_proj + residual add. The projections of the
fast level's decode kernels also take an 8-bit weight with its row scales (`scale`): `quant.quant_linear` then."""
from __future__ import annotations

import torch

from .attention import kv_cache_write_static
from .conv1d import conv1d_decode
from .delta_rule import gated_delta_rule_recurrent
from .deltanet import deltanet_gates, l2norm_qk
from .linear import linear
from .mlp import gate_up, swiglu, swiglu_merged
from .norms import gated_rms_norm, qk_norm, rms_norm
from .precision import acc
from .quant import quant_linear
from .rope import apply_rope


def _linear(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """`linear(x, weight)`, or with `scale` the 8-bit weight's: `quant_linear(x, weight, scale)` (per row)."""
    return linear(x, weight) if scale is None else quant_linear(x, weight, scale)


def rms_norm_linear(x: torch.Tensor, norm_weight: torch.Tensor, weight: torch.Tensor,
                    eps: float = 1e-6, scale: torch.Tensor | None = None) -> torch.Tensor:
    """`linear(rms_norm(x, norm_weight), weight)`: ln1 + in_proj, ln2 + gate/up in one kernel.

    x: [T, hidden]; norm_weight: [hidden] (zero-centred); weight: [N, hidden]; returns [T, N].
    scale: an 8-bit weight's row scales [N] (`quant_linear`).
    """
    return _linear(rms_norm(x, norm_weight, eps), weight, scale)


def gate_up_swiglu(x: torch.Tensor, gate_weight: torch.Tensor, up_weight: torch.Tensor) -> torch.Tensor:
    """`silu(x @ Wg.T) * (x @ Wu.T)`: the MLP's first half. x: [T, hidden]; weights [I, hidden]; returns [T, I]."""
    return swiglu(*gate_up(x, gate_weight, up_weight))


def gate_up_swiglu_merged(x: torch.Tensor, gate_up_weight: torch.Tensor) -> torch.Tensor:
    """`silu(gate) * up` with [gate | up] = x @ gate_up_weight.T.

    x: [T, hidden]; gate_up_weight: [2 * I, hidden] (W_gate stacked over W_up); returns [T, I].
    """
    return swiglu_merged(linear(x, gate_up_weight))


def rms_norm_gate_up_swiglu(x: torch.Tensor, norm_weight: torch.Tensor, gate_up_weight: torch.Tensor,
                            eps: float = 1e-6, scale: torch.Tensor | None = None) -> torch.Tensor:
    """ln2, the merged gate/up projection and SwiGLU: `gate_up_swiglu_merged(rms_norm(x), gate_up_weight)`.

    x: [T, hidden] (the residual stream h); norm_weight: [hidden] (zero-centred);
    gate_up_weight: [2 * I, hidden]; returns [T, I]. scale: an 8-bit weight's row scales [2 * I].
    """
    return swiglu_merged(_linear(rms_norm(x, norm_weight, eps), gate_up_weight, scale))


def linear_residual(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor,
                    scale: torch.Tensor | None = None) -> torch.Tensor:
    """A projection and the residual add after it: `residual + x @ weight.T`, summed in fp32 and rounded
    once to the stream's dtype (the fused kernel's rounding; the unfused pair rounds `x @ weight.T` to x's
    dtype first).

    x: [T, K] (o_proj / out_proj / down input); weight: [N, K]; residual: [T, N], the stream (model dtype,
    fp32 in fp16 mode); returns [T, N] in residual's dtype. scale: an 8-bit weight's row scales [N].
    """
    y = linear(x.float(), weight.float()) if scale is None else quant_linear(x.float(), weight, scale)
    return (residual.float() + y).to(residual.dtype)


def linear_residual_eager(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor,
                          scale: torch.Tensor | None = None) -> torch.Tensor:
    """`linear_residual` as eager PyTorch runs it in the model's dtype, the baseline a fused kernel is timed
    against (the reference multiplies in fp32, which no model does): one cuBLAS GEMM with the add in its
    epilogue (`addmm`) where the stream has x's dtype; the product rounded to x's dtype, then added, where the
    stream is fp32 (the fp16 mode). An 8-bit weight (`scale`) goes to the reference."""
    if scale is not None:
        return linear_residual(x, weight, residual, scale)
    if residual.dtype == x.dtype:
        return torch.addmm(residual, x, weight.t())   # [T, N]
    return residual + linear(x, weight)


def qk_norm_rope_cache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor,
                       k_weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pos: torch.Tensor,
                       k_cache: torch.Tensor, v_cache: torch.Tensor, eps: float = 1e-6):
    """An attention layer's steps between its projection and the attention: q_norm and k_norm (per-head
    RMSNorm), rotate-half RoPE on q and k, and k, v written into the cache at their positions.

    q: [T, heads, head_dim]; k, v: [T, kv_heads, head_dim] (views of the projection's output);
    q_weight, k_weight: [head_dim]; cos, sin: [positions, rotary_dim]; pos: [T] ints;
    k_cache, v_cache: [max_len, kv_heads, head_dim], updated in place.
    returns (q rotated [T, heads, head_dim] in q's dtype, k_cache, v_cache).
    """
    q_out = apply_rope(qk_norm(q, q_weight, eps), cos, sin, pos)
    k_rot = apply_rope(qk_norm(k, k_weight, eps), cos, sin, pos)
    kv_cache_write_static(k_rot, v, k_cache, v_cache, pos)
    return q_out, k_cache, v_cache


def rms_norm_linear_conv(x: torch.Tensor, norm_weight: torch.Tensor, weight: torch.Tensor,
                         conv_weight: torch.Tensor, conv_state: torch.Tensor, eps: float = 1e-6,
                         scale: torch.Tensor | None = None):
    """The DeltaNet in-projection of one token, then the conv's step on its first C outputs:
    y = `rms_norm_linear(x, norm_weight, weight, eps, scale)` [1, N]; returns ([conv1d_decode(y[:, :C]) |
    y[:, C:]] [1, N] in x's dtype, the new conv state [C, K])."""
    y = rms_norm_linear(x, norm_weight, weight, eps, scale)                     # [1, N]
    C = conv_weight.shape[0]
    conv, state = conv1d_decode(y[:, :C], conv_weight, conv_state)              # [1, C], [C, K]
    return torch.cat([conv, y[:, C:]], dim=1), state


def gated_delta_rule_recurrent_gates(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor,
                                     b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor,
                                     initial_state: torch.Tensor | None = None, qk_norm: bool = False,
                                     eps: float = 1e-6):
    """The DeltaNet gates, then the recurrent delta rule: `gated_delta_rule_recurrent(q, k, v, g, beta,
    initial_state)` with (beta, g) = `deltanet_gates(b, a, A_log, dt_bias)`, beta kept in fp32; with
    qk_norm, q and k are first L2-normalised per head (q scaled by DK ** -0.5) as the conv's fused kernels
    do. Shapes as those two take them; returns (out [T, HV, DV] in v's dtype, final_state fp32)."""
    if qk_norm:
        q, k = l2norm_qk(acc(q), acc(k), eps)                                   # [T, H, DK] each
    beta, g = deltanet_gates(acc(b), a, A_log, dt_bias)
    return gated_delta_rule_recurrent(q, k, v, g, beta, initial_state)


def gated_delta_rule_chunked_gates(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor,
                                   b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor,
                                   initial_state: torch.Tensor | None = None, g: torch.Tensor | None = None,
                                   z: torch.Tensor | None = None, norm_weight: torch.Tensor | None = None,
                                   eps: float = 1e-6, chunk_size: int | None = None):
    """The DeltaNet gates inside the chunked delta rule: the same math as `gated_delta_rule_recurrent_gates`
    (the chunked form is exact); with z and norm_weight, its output through `gated_rms_norm`. g is the
    Triton kernel's workspace for the log-decays and chunk_size its chunking: neither is used here."""
    out, state = gated_delta_rule_recurrent_gates(q, k, v, a, b, A_log, dt_bias, initial_state)
    return (out if z is None else gated_rms_norm(out, z, norm_weight, eps)), state


def gated_norm_linear_residual(x: torch.Tensor, z: torch.Tensor, norm_weight: torch.Tensor,
                               weight: torch.Tensor, residual: torch.Tensor, eps: float = 1e-6,
                               scale: torch.Tensor | None = None) -> torch.Tensor:
    """The DeltaNet output: gated RMSNorm of x [T, heads, DV] with z, out_proj, and the residual add:
    `linear_residual(gated_rms_norm(x, z, norm_weight, eps) [T, heads * DV], weight, residual, scale)`."""
    T = x.shape[0]
    return linear_residual(gated_rms_norm(x, z, norm_weight, eps).reshape(T, -1), weight, residual, scale)


def gated_norm_linear_residual_eager(x: torch.Tensor, z: torch.Tensor, norm_weight: torch.Tensor,
                                     weight: torch.Tensor, residual: torch.Tensor, eps: float = 1e-6,
                                     scale: torch.Tensor | None = None) -> torch.Tensor:
    """`gated_norm_linear_residual` as eager PyTorch runs it: the gated norm, then `linear_residual_eager`."""
    T = x.shape[0]
    return linear_residual_eager(gated_rms_norm(x, z, norm_weight, eps).reshape(T, -1), weight, residual, scale)
