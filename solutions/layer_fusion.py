"""Fusion into the epilogue and per head (chapter 22_layer_fusion): the small kernels a layer still runs after
chapter 21_norm_fusion, folded into the kernels around them (the engine's level "fast").

    projection + residual add            y = residual + x @ W.T         (o_proj, out_proj, down: the stream in place)
    gated RMSNorm + out_proj + residual  the DeltaNet output at decode, normalised per head inside the GEMV
    q/k norm + RoPE + KV cache write     an attention layer's five small kernels, one program per head
    DeltaNet gates + recurrence          beta and g computed where chapter 15_delta_rule's recurrence uses them

- `gemv_residual_kernel` / `gemm_residual_kernel` add the residual stream to the fp32 sums in their
  epilogue and store the new stream in place: the projection's output is never rounded or written.
- `gated_norm_gemv_residual_kernel`: a K tile holds whole value heads, so each head's statistic is
  computed in the tile that uses it; the residual add is its epilogue.
- `qk_norm_rope_cache_kernel`: one program per (token, head) loads its head once, normalises it in fp32,
  rotates it, and stores the query head or the key and value rows into the cache.
- `recurrent_gates_kernel`: chapter 15_delta_rule's recurrent kernel reading the gates' inputs a, b instead of g and
  beta; with QK_NORM also the L2 norm of q and k, which a program holding a whole head gets for free.
The prefill counterpart of the last one, the gates inside the chunked rule's first kernel and the gated
norm in its last, is `gated_delta_rule_chunked_gates` (solutions/delta_rule.py).
The two GEMVs also read 8-bit weights (`scale=`, chapter 31_weight_quant): W_SCALED, one fp32 scale a row, applied
to the row's sum once, before the residual add.
"""

import torch
import triton
import triton.language as tl

from tritonllm_course import kernels, tma_gemm, triton_helpers as helpers, validate
from tritonllm_course.runtime import pdl_args, runtime
from tritonllm_course.triton_helpers import (pdl_enter, pdl_launch_dependents, pdl_wait, row_tile, sigmoid, silu,
                                           softplus)

# chapter 05_projections's GEMM tile and chapter 15_delta_rule's step of the recurrence, from the learner's linear.py
# and delta_rule.py once written (`kernels.jit_function`)
linear_tile = kernels.jit_function("linear", "linear_tile", __file__)
delta_rule_step = kernels.jit_function("delta_rule", "delta_rule_step", __file__)

SMS = 132                    # streaming multiprocessors of an H200: the GEMV grid is sized against them


@triton.jit
def row_scale(scale_ptr, rows, N, W_SCALED: tl.constexpr):
    """8-bit weights' fp32 scales of `rows` (0 past N), or 1.0 when W_SCALED is off: nothing is loaded, and the
    kernels multiply by it only under W_SCALED."""
    scale = 1.0
    if W_SCALED:
        scale = tl.load(scale_ptr + rows, mask=rows < N, other=0.0)
    return scale


@triton.jit
def gemv_residual_kernel(x_ptr, w_ptr, res_ptr, y_ptr, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         UNROLL: tl.constexpr = 0, PDL: tl.constexpr = False, W_SCALED: tl.constexpr = False,
                         scale_ptr=None):
    """One token: y[n] = res[n] + sum_k W[n, k] x[k] for this program's BLOCK_N rows; y may be res.
    UNROLL: K again, as a compile-time constant (0: K at run time), so a walk of one step is no loop.
    PDL (chapter 18_cuda_graphs): the first weight tile (with PDL the whole row) is loaded before the wait for the
    kernel that wrote x and res.
    W_SCALED (8-bit weights, chapter 31_weight_quant): W holds int8 or fp8, converted to fp32 exactly in the walk,
    and scale_ptr its fp32 row scales [N]: y[n] = res[n] + s[n] * sum_k q[n, k] x[k], the scale applied once to
    the row's sum and before the add (the residual is not scaled). Off, the scale code is not compiled."""
    if PDL:
        pdl_launch_dependents()
    if UNROLL > 0:
        K = UNROLL              # folds the walk's bounds and masks: one tile ahead past K then reads nothing
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    w = row_tile(w_ptr, rows, N, K, 0, BLOCK_K)                     # the first tile: no kernel writes weights
    w_scale = row_scale(scale_ptr, rows, N, W_SCALED)               # weights too: before the wait
    if PDL:
        pdl_wait()
    # BEGIN SOLUTION: the residual loaded first (as fp32); the walk along K, each step's x tile (fp32) times
    #   w (the tile loaded above, then each step loading the next: row_tile at k0 + BLOCK_K);
    #   the fp32 row sums (W_SCALED: times w_scale) plus the residual, stored in y's dtype
    ok = rows < N
    # each element of the stream is read, then written, by this program alone: y may alias res. Loaded
    # first, its latency overlaps the weights'; after the row sums' cross-warp reduction (a barrier) it
    # adds a memory round trip to every program (an H200's decode step: loaded first, a call went from
    # 4.08 to 3.88 us<!-- unsaved: 2026-11-30 -->)
    r = tl.load(res_ptr + rows, mask=ok, other=0.0).to(tl.float32)
    cols = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)       # one fp32 partial sum per lane
    for k0 in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + k0 + cols, mask=k0 + cols < K, other=0.0).to(tl.float32)           # [BLOCK_K]
        acc += w.to(tl.float32) * x[None, :]
        w = row_tile(w_ptr, rows, N, K, k0 + BLOCK_K, BLOCK_K)  # one tile ahead (past K: no memory read)
    y = tl.sum(acc, axis=1)
    if W_SCALED:        # the row's scale, once, on the sum alone: the residual is not scaled
        y = y * w_scale
    tl.store(y_ptr + rows, (y + r).to(y_ptr.dtype.element_ty), mask=ok)
    # END SOLUTION


@triton.jit
def gemm_residual_kernel(x_ptr, w_ptr, res_ptr, y_ptr, M, N, K,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         PDL: tl.constexpr = False):
    """Several tokens: y[M, N] = res[M, N] + x[M, K] @ W[N, K].T, one BLOCK_M x BLOCK_N tile per program.
    Given complete: chapter 05_projections's tile (`linear_tile`) with the same epilogue as the GEMV's."""
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = linear_tile(x_ptr, w_ptr, rm, rn, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K)          # fp32 [BLOCK_M, BLOCK_N]
    offs = rm[:, None].to(tl.int64) * N + rn[None, :]
    ok = (rm < M)[:, None] & (rn < N)[None, :]
    r = tl.load(res_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, (acc + r).to(y_ptr.dtype.element_ty), mask=ok)


@triton.jit
def gated_norm_gemv_residual_kernel(x_ptr, z_ptr, nw_ptr, w_ptr, res_ptr, y_ptr, N, K, sx, sz, eps,
                                    DV: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                                    UNROLL: tl.constexpr = 0, PDL: tl.constexpr = False,
                                    W_SCALED: tl.constexpr = False, scale_ptr=None):
    """Token t = program_id(1): y[t, n] = res[t, n] + sum_k W[n, k] g[k], where g = the gated RMSNorm of the
    delta rule's output x [K = heads * DV]: per head x / rms(x) * nw * silu(z). BLOCK_K is a multiple of
    DV, so every head lies in one tile and its statistic is computed where it is used.
    PDL (chapter 18_cuda_graphs): the first weight tile (with PDL the whole row) and the norm's weight are loaded
    before the wait for the kernel that wrote x, z and res. UNROLL, W_SCALED: as in gemv_residual_kernel; the
    gated norm acts on x, along K, so it commutes with the scale of W's row: the scale still goes on the row's
    sum once, before the residual add."""
    if PDL:
        pdl_launch_dependents()
    if UNROLL > 0:
        K = UNROLL
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    t = tl.program_id(1).to(tl.int64)
    row_ok = rows < N
    cols = tl.arange(0, BLOCK_K)
    w = row_tile(w_ptr, rows, N, K, 0, BLOCK_K)                     # the first tile: no kernel writes weights
    nw = tl.load(nw_ptr + cols % DV).to(tl.float32)                  # k0 is a multiple of DV: k % DV = cols % DV
    w_scale = row_scale(scale_ptr, rows, N, W_SCALED)
    if PDL:
        pdl_wait()
    # BEGIN SOLUTION: per K tile: x and z as fp32; x reshaped [BLOCK_K // DV, DV] to normalise each head by its own rms;
    #   times nw[k % DV] and silu(z); fp32 products with w (the tile loaded above, then each step loading
    #   the next: row_tile at k0 + BLOCK_K); after the loop the row sums (W_SCALED: times w_scale) plus the
    #   residual, stored in y's dtype
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + cols
        k_ok = k < K
        x = tl.load(x_ptr + t * sx + k, mask=k_ok, other=0.0).to(tl.float32)
        heads = tl.reshape(x, [BLOCK_K // DV, DV])                   # one row per head of the tile
        inv_rms = tl.rsqrt(tl.sum(heads * heads, axis=1) / DV + eps)
        z = tl.load(z_ptr + t * sz + k, mask=k_ok, other=0.0).to(tl.float32)
        g = tl.reshape(heads * inv_rms[:, None], [BLOCK_K]) * nw * silu(z)      # padding: 0 * finite
        acc += w.to(tl.float32) * g[None, :]
        w = row_tile(w_ptr, rows, N, K, k0 + BLOCK_K, BLOCK_K)      # one tile ahead (past K: no memory read)
    r = tl.load(res_ptr + t * N + rows, mask=row_ok, other=0.0).to(tl.float32)
    y = tl.sum(acc, axis=1)
    if W_SCALED:
        y = y * w_scale
    tl.store(y_ptr + t * N + rows, (y + r).to(y_ptr.dtype.element_ty), mask=row_ok)
    # END SOLUTION


@triton.jit
def qk_norm_rope_cache_kernel(q_ptr, k_ptr, v_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, pos_ptr, q_out_ptr,
                              k_cache_ptr, v_cache_ptr, sq_t, sq_h, sk_t, sk_h, sv_t, sv_h,
                              H, KV, D, half, num_positions, max_len, eps,
                              BLOCK_D: tl.constexpr, PDL: tl.constexpr = False):
    """Program (t, r): head r of token t. r < H: query head r, normalised and rotated into q_out[t, r].
    Else key head r - H: normalised, rotated and stored in the cache row pos[t], its v row beside it."""
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    t, r = tl.program_id(0), tl.program_id(1)
    is_q = r < H
    d = tl.arange(0, BLOCK_D)
    in_row = d < D
    rot = d < 2 * half                                           # the rotary dims
    partner = tl.where(d < half, d + half, d - half)             # rotate-half: (i, i + half) pairs
    pos = tl.load(pos_ptr + t).to(tl.int64)
    kv = r - H
    # BEGIN SOLUTION: the head's row (q's or k's, strided) and its rotation partners as fp32;
    #   RMSNorm with (1 + w) (q_norm's or k_norm's weight);
    #   y = n * cos + sign * n[partner] * sin on the rotary dims (sign -1 in the first half), n elsewhere;
    #   q: store to q_out[t, r]; k: store to k_cache[pos, kv], copy v[t, kv] to v_cache[pos, kv]
    #   (only for 0 <= pos < max_len)
    if is_q:
        row = q_ptr + t.to(tl.int64) * sq_t + r * sq_h
        w_ptr = qw_ptr
    else:
        row = k_ptr + t.to(tl.int64) * sk_t + kv * sk_h
        w_ptr = kw_ptr
    x = tl.load(row + d, mask=in_row, other=0.0).to(tl.float32)
    xp = tl.load(row + partner, mask=rot, other=0.0).to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=0) / D + eps)          # the whole head's statistic
    n = x * inv_rms * (1.0 + tl.load(w_ptr + d, mask=in_row, other=0.0).to(tl.float32))
    n_p = xp * inv_rms * (1.0 + tl.load(w_ptr + partner, mask=rot, other=0.0).to(tl.float32))
    ok = (pos >= 0) & (pos < num_positions)
    rot_ok = tl.where(ok, rot, False)   # not `rot & ok`: triton 3.9's interpreter types a block & a scalar as int
    c = tl.load(cos_ptr + pos * 2 * half + d, mask=rot_ok, other=float("nan")).to(tl.float32)
    s = tl.load(sin_ptr + pos * 2 * half + d, mask=rot_ok, other=float("nan")).to(tl.float32)
    y = tl.where(rot, n * c + tl.where(d < half, -n_p, n_p) * s, n)
    if is_q:
        tl.store(q_out_ptr + (t.to(tl.int64) * H + r) * D + d, y.to(q_out_ptr.dtype.element_ty), mask=in_row)
    else:
        # an out-of-range position writes nothing (a captured graph must never write outside the cache)
        w_ok = in_row & (pos >= 0) & (pos < max_len)
        dst = (pos * KV + kv) * D + d
        tl.store(k_cache_ptr + dst, y.to(k_cache_ptr.dtype.element_ty), mask=w_ok)
        vrow = tl.load(v_ptr + t.to(tl.int64) * sv_t + kv * sv_h + d, mask=w_ok)
        tl.store(v_cache_ptr + dst, vrow, mask=w_ok)
    # END SOLUTION


@triton.jit
def recurrent_gates_kernel(q_ptr, k_ptr, v_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, s0_ptr, o_ptr, st_ptr,
                           T, sq, sk, sv, sa, sb, q_scale, eps, H: tl.constexpr, HV: tl.constexpr,
                           DK: tl.constexpr, DV: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                           HAS_S0: tl.constexpr, QK_NORM: tl.constexpr, PDL: tl.constexpr = False):
    """Chapter 15_delta_rule's recurrent kernel reading the gates' inputs: per token, beta = sigmoid(b) and
    g = -exp(A_log) * softplus(a + dt_bias) of its value head, computed in fp32 where they are used.
    QK_NORM: q and k arrive as the conv left them, and are L2-normalised here (q also scaled by q_scale).
    PDL (chapter 18_cuda_graphs): the gates' parameters and the initial state are loaded before the wait. The engine's
    state is only written by this kernel, in the step before, and a step starts when the one before has
    finished: with PDL, s0 must not be the output of a kernel of the same step."""
    if PDL:
        pdl_launch_dependents()
    hv = tl.program_id(0)                      # value head
    h = hv // (HV // H)                        # the key head it reads
    rk = tl.arange(0, BK)
    rv = tl.program_id(1) * BV + tl.arange(0, BV)
    mk, mv = rk < DK, rv < DV
    state = hv * DK * DV + rk[:, None] * DV + rv[None, :]   # [BK, BV] offsets into [HV, DK, DV]
    smask = mk[:, None] & mv[None, :]
    # the head's gate parameters (fp32) and its state slice: what no kernel of the step writes
    decay_rate = -tl.exp(tl.load(A_log_ptr + hv).to(tl.float32))
    dt_bias = tl.load(dt_bias_ptr + hv).to(tl.float32)
    if HAS_S0:
        S = tl.load(s0_ptr + state, mask=smask, other=0.0)
    else:
        S = tl.zeros([BK, BV], dtype=tl.float32)
    if PDL:
        pdl_wait()              # from here on q, k, v, a and b are the previous kernels' stores
    # BEGIN SOLUTION: per token t: q and k (QK_NORM: each divided by sqrt(its sum of squares + eps), q times
    #   q_scale), beta and g (decay_rate, dt_bias above) from b[t, hv] and a[t, hv], then delta_rule_step on S;
    #   store o and finally S
    for t in range(T):
        q = tl.load(q_ptr + t * sq + h * DK + rk, mask=mk, other=0.0).to(tl.float32)
        k = tl.load(k_ptr + t * sk + h * DK + rk, mask=mk, other=0.0).to(tl.float32)
        if QK_NORM:     # the whole head is in this program: its norm costs nothing here
            q = q * (tl.rsqrt(tl.sum(q * q, axis=0) + eps) * q_scale)
            k = k * tl.rsqrt(tl.sum(k * k, axis=0) + eps)
        v = tl.load(v_ptr + t * sv + hv * DV + rv, mask=mv, other=0.0).to(tl.float32)
        beta = sigmoid(tl.load(b_ptr + t * sb + hv).to(tl.float32))
        g = decay_rate * softplus(tl.load(a_ptr + t * sa + hv).to(tl.float32) + dt_bias)
        S, o = delta_rule_step(S, q, k, v, g, beta)
        tl.store(o_ptr + (t * HV + hv) * DV + rv, o.to(o_ptr.dtype.element_ty), mask=mv)
    tl.store(st_ptr + state, S, mask=smask)
    # END SOLUTION


def gemv_residual_config(N: int, K: int, interpreted: bool = False, pdl: bool = False) -> dict:
    """Launch parameters of the GEMVs with the residual add in their epilogue: chapter 05_projections's GEMV config, the
    best of the sweep at both out-projection shapes (`lab/gemv_sweep.py`); with PDL the whole row in one
    tile (`triton_helpers.pdl_gemv_config`). Under the CPU interpreter 64 x 64 tiles, so small shapes still
    take several K steps."""
    if pdl and not interpreted and (tile := helpers.pdl_gemv_config(K)):
        return {**tile, "UNROLL": K}
    if interpreted:
        # both walks: unrolled up to 8 steps (as with PDL on a GPU), a loop beyond
        return {"BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4, "UNROLL": K if triton.cdiv(K, 64) <= 8 else 0}
    block_n = 2
    many_programs = triton.cdiv(N, block_n) >= 64 * SMS
    block_k = min(512 if many_programs else 2048, max(16, triton.next_power_of_2(K)))
    return {"BLOCK_N": block_n, "BLOCK_K": block_k, "num_warps": max(1, block_n * block_k // (16 * 32)),
            "UNROLL": 0}


def gemm_residual_config(M: int, N: int, K: int, dtype: torch.dtype, device: torch.device) -> dict:
    """Launch parameters of the GEMM + residual: chapter 05_projections's tiles, but for N < 4096 (the 1024-row
    out- and down projections). At M < 256, 64 x 16 tiles in steps of 256 (at M = 128: 128 programs for
    132 SMs; `lab/prefill_probe.py`; a split along K in two kernels led alone at the down projection and
    brought the first token no sooner: `lab/prompt_splitk_probe.py`).
    From M = 256 on, 128-row tiles as wide as still make about one wave (`WAVE_TILES`, widest first; the
    narrowest where none does): on an H200 128 x 256 at M = 4,096 and 128 x 64 in steps of 128 at M = 1,024,
    which the square 128 x 128 tiles lost to (`lab/prompt_gemm_sweep.py`). Only tiles whose stages fit the
    GPU's shared memory are considered; stages capped by shared memory."""
    if not helpers.gpu_launch(device):   # the interpreter: few, large tiles
        return {"BLOCK_M": min(64, max(16, triton.next_power_of_2(M))), "BLOCK_N": 64, "BLOCK_K": 64,
                "num_warps": 4, "num_stages": 1}
    block_m = min(128, max(16, triton.next_power_of_2(M)))
    shared = _max_shared_memory(device.index or 0)
    fits = [(n, k, st) for n, k, st in WAVE_TILES if (128 + n) * k * dtype.itemsize * st <= shared]
    if M >= 256 and N < 4096 and fits:
        wave = _sm_count(device) * 9 // 10
        n, k, st = next((t for t in fits if triton.cdiv(M, 128) * triton.cdiv(N, t[0]) >= wave), fits[-1])
        cfg = {"BLOCK_M": 128, "BLOCK_N": n, "BLOCK_K": k, "num_warps": 8, "num_stages": st}
    elif M >= 256:
        cfg = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}
    elif N >= 4096:
        cfg = {"BLOCK_M": block_m, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 8, "num_stages": 4}
    else:       # thinner tiles, longer K steps (see the docstring)
        cfg = {"BLOCK_M": min(64, block_m), "BLOCK_N": 16, "BLOCK_K": 256, "num_warps": 4, "num_stages": 3}
    stage_bytes = (cfg["BLOCK_M"] + cfg["BLOCK_N"]) * cfg["BLOCK_K"] * dtype.itemsize
    cfg["num_stages"] = max(1, min(cfg["num_stages"], shared // stage_bytes))
    return cfg


# (BLOCK_N, BLOCK_K, stages) of the GEMM + residual's 128-row tiles from M = 256 on, widest first, 8 warps: on an
# H200 the fastest 256- and 128-wide tiles at M = 4,096 (the 256-wide one within
# 0.15%<!-- fig:code.layer_fusion.wave_tiles.n256.stages_gap.pct --> of its 4-stage form) and the fastest 64-wide
# one at M = 1,024 (lab/prompt_gemm_sweep.py, out- and down projections + residual, 2026-12-05)
WAVE_TILES = ((256, 64, 3), (128, 64, 3), (64, 128, 4))


def _sm_count(device: torch.device) -> int:
    """SMs of that CUDA device, or of the GPU compiled for (`triton_helpers.gpu_of`)."""
    return helpers.gpu_of(device).sms


def _max_shared_memory(device_index: int) -> int:
    """Shared memory a block may use on that CUDA device, or on the GPU compiled for (`triton_helpers`)."""
    return helpers.shared_memory(device_index)


def _scale_args(scale: torch.Tensor | None) -> dict:
    """The GEMVs' arguments for an 8-bit weight's row scales; none for a weight in the model dtype, whose kernel
    then compiles without the scale code."""
    return {} if scale is None else {"W_SCALED": True, "scale_ptr": scale}


def _check_norm(norm_weight: torch.Tensor, K: int, eps: float, name: str = "norm_weight") -> None:
    validate.tensor(norm_weight, name, dtype=validate.FLOATS, shape=(K,))
    validate.positive(eps, "eps")


def linear_residual(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor,
                    out: torch.Tensor | None = None, scale: torch.Tensor | None = None) -> torch.Tensor:
    """`residual + x @ weight.T` in one kernel: o_proj / out_proj / down and the residual add after them.

    x:        [..., K] float, contiguous, the weight's dtype (the attention's or DeltaNet's output, or the
              SwiGLU's)
    weight:   [N, K] row-major (1024 x 2048, 1024 x 3584)
    residual: [..., N], the residual stream (the model dtype, or fp32 in fp16 mode), contiguous
    out:      optional [..., N] buffer in residual's dtype; `out=residual` updates the stream in place
    The projection is summed in fp32 and added to the stream before the one rounding to the stream's
    dtype (the unfused pair rounds the projection to x's dtype first).
    scale:    with an 8-bit weight (int8 or float8_e4m3fn), its fp32 scales [N], one a row; one token only
              (`validate.scaled_projection`: prompts run the quant GEMM)
    """
    K = validate.scaled_projection(x, weight, scale)
    N = weight.shape[0]
    validate.tensor(residual, "residual", dtype=validate.FLOATS, shape=(*x.shape[:-1], N))
    device = validate.same_device(x=x, weight=weight, residual=residual)
    out = validate.output(out, "out", tuple(residual.shape), residual.dtype, device)
    validate.disjoint({"out": out}, {"x": x, "weight": weight, "residual": residual}, same=("residual",))
    M = x.shape[:-1].numel()                    # not -1, which an empty K or N leaves undetermined
    x2, r2, out2 = x.reshape(M, K), residual.view(M, N), out.view(M, N)          # [M, K], [M, N], [M, N]
    if M == 0 or N == 0:
        return out
    if K == 0:                                  # a projection of no term adds 0: out is the residual
        return out.copy_(residual)
    if M == 1:
        pdl = pdl_args()
        cfg = gemv_residual_config(N, K, runtime().interpreted, pdl["PDL"])
        gemv_residual_kernel[(triton.cdiv(N, cfg["BLOCK_N"]),)](
            x2, weight, r2, out2, N, K, BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], UNROLL=cfg["UNROLL"],
            num_warps=cfg["num_warps"], **pdl, **_scale_args(scale))
    elif tma_gemm.usable(x2, weight):      # sm_90 on, long prompts: the TMA's copies
        tma_gemm.launch(x2, weight, out2, residual=r2, pdl=pdl_args())
    else:
        cfg = gemm_residual_config(M, N, K, x.dtype, x.device)
        grid = (triton.cdiv(M, cfg["BLOCK_M"]), triton.cdiv(N, cfg["BLOCK_N"]))
        gemm_residual_kernel[grid](x2, weight, r2, out2, M, N, K, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
                                   BLOCK_K=cfg["BLOCK_K"], num_warps=cfg["num_warps"],
                                   num_stages=cfg["num_stages"], **pdl_args())
    return out


def qk_norm_rope_cache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor,
                       k_weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pos: torch.Tensor,
                       k_cache: torch.Tensor, v_cache: torch.Tensor, eps: float = 1e-6,
                       out: torch.Tensor | None = None) -> torch.Tensor:
    """q_norm, k_norm, RoPE on q and k, and the KV cache write: five kernels of chapters 06_rope to 08_attention in one.

    q:                [T, heads, head_dim] (a view of the projection's output: each head contiguous)
    k, v:             [T, kv_heads, head_dim], likewise
    q_weight, k_weight: [head_dim], the norms' offsets from 1
    cos, sin:         [positions, rotary_dim] tables (`reference.rope_cache`), rotary_dim <= head_dim
    pos:              [T] int positions in device memory (the cache rows; within the tables)
    k_cache, v_cache: [max_len, kv_heads, head_dim] in k's dtype, updated in place
    out:              optional [T, heads, head_dim] buffer for the rotated q (q's dtype)
    returns out. One program per (token, head): its row normalised in fp32, rotated, stored once.
    """
    validate.tensor(q, "q", dtype=validate.FLOATS, ndim=3, contiguous=False)
    T, H, D = q.shape
    validate.tensor(k, "k", dtype=q.dtype, ndim=3, contiguous=False)
    KV = k.shape[1]
    validate.tensor(k, "k", shape=(T, KV, D), contiguous=False)
    validate.tensor(v, "v", dtype=q.dtype, shape=(T, KV, D), contiguous=False)
    for x, name in ((q, "q"), (k, "k"), (v, "v")):
        if x.stride(2) != 1:
            raise ValueError(f"{name} must be contiguous within each head (stride 1 on the last dim), got "
                             f"strides {x.stride()}")
    _check_norm(q_weight, D, eps, "q_weight")
    validate.tensor(k_weight, "k_weight", dtype=q_weight.dtype, shape=(D,))
    validate.tensor(cos, "cos", dtype=validate.FLOATS, ndim=2)
    validate.tensor(sin, "sin", dtype=cos.dtype, shape=tuple(cos.shape))
    num_positions, rotary_dim = cos.shape
    if rotary_dim % 2 or not 0 < rotary_dim <= D:
        raise ValueError(f"cos/sin have rotary_dim {rotary_dim}; it must be even and in [2, head_dim = {D}]")
    validate.tensor(pos, "pos", dtype=validate.INTS, shape=(T,))
    validate.tensor(k_cache, "k_cache", dtype=k.dtype, ndim=3)
    max_len = k_cache.shape[0]
    validate.tensor(k_cache, "k_cache", shape=(max_len, KV, D))
    validate.tensor(v_cache, "v_cache", dtype=v.dtype, shape=(max_len, KV, D))
    device = validate.same_device(q=q, k=k, v=v, q_weight=q_weight, k_weight=k_weight, cos=cos, sin=sin,
                                  pos=pos, k_cache=k_cache, v_cache=v_cache)
    validate.device_range(pos, 0, min(num_positions, max_len) - 1, "position", "beyond the cache or the cos/sin table")
    validate.device_distinct(pos, "position", "each token's key and value are stored at a row of their own")
    out = validate.output(out, "out", (T, H, D), q.dtype, device)
    validate.disjoint({"out": out, "k_cache": k_cache, "v_cache": v_cache},
                      {"q": q, "k": k, "v": v, "q_weight": q_weight, "k_weight": k_weight, "cos": cos, "sin": sin,
                       "pos": pos})
    if T == 0:
        return out
    qk_norm_rope_cache_kernel[(T, H + KV)](
        q, k, v, q_weight, k_weight, cos, sin, pos, out, k_cache, v_cache, q.stride(0), q.stride(1),
        k.stride(0), k.stride(1), v.stride(0), v.stride(1), H, KV, D, rotary_dim // 2, num_positions, max_len,
        eps, BLOCK_D=triton.next_power_of_2(D), num_warps=max(1, min(4, triton.next_power_of_2(D) // 64)),
        **pdl_args())
    return out


def gated_delta_rule_recurrent_gates(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor,
                                     b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor,
                                     initial_state: torch.Tensor | None = None, out: torch.Tensor | None = None,
                                     final_state: torch.Tensor | None = None, block_v: int = 16,
                                     qk_norm: bool = False, eps: float = 1e-6, num_warps: int = 1):
    """The DeltaNet gates (chapter 14_gates_l2norm) inside the recurrent delta rule (chapter 15_delta_rule): one kernel
    for two.

    q, k [T, H, DK], v [T, HV, DV] as `gated_delta_rule_recurrent` takes them (each token's heads
    contiguous); a, b [T, HV]: in_proj_a's and in_proj_b's outputs (each token's row contiguous);
    A_log, dt_bias [HV]; initial_state [HV, DK, DV] fp32 or None; final_state may be initial_state
    (updated in place). returns (out [T, HV, DV] in v's dtype, final_state fp32). beta and g never
    reach memory. qk_norm: q and k come straight from the conv (`rms_norm_linear_conv`): each head is
    L2-normalised here (eps inside the root), q also scaled by DK ** -0.5, as `conv1d_l2norm_*` would.
    One warp per [DK, 16] slice of the state: with the norms' reductions it beats four warps
    (`lab/decode_small_sweep.py`).
    """
    T, H, HV, DK, DV, _, out, final_state = validate.delta_rule_gate_inputs(   # chapter 15_delta_rule's head-size limit
        q, k, v, a, b, A_log, dt_bias, initial_state, out, final_state, max_head_dim=256)
    if block_v not in (4, 8, 16, 32, 64):
        raise ValueError(f"block_v must be 4, 8, 16, 32 or 64, got {block_v}")
    if qk_norm:
        validate.positive(eps, "eps")
    if num_warps not in (1, 2, 4, 8):
        raise ValueError(f"num_warps must be 1, 2, 4 or 8, got {num_warps}")
    recurrent_gates_kernel[(HV, triton.cdiv(DV, block_v))](
        q, k, v, a, b, A_log, dt_bias, initial_state, out, final_state, T, q.stride(0), k.stride(0),
        v.stride(0), a.stride(0), b.stride(0), DK ** -0.5, eps, H=H, HV=HV, DK=DK, DV=DV,
        BK=max(16, triton.next_power_of_2(DK)), BV=block_v, HAS_S0=initial_state is not None,
        QK_NORM=bool(qk_norm), num_warps=num_warps, **pdl_args())
    return out, final_state


def gated_norm_linear_residual(x: torch.Tensor, z: torch.Tensor, norm_weight: torch.Tensor,
                               weight: torch.Tensor, residual: torch.Tensor, eps: float = 1e-6,
                               out: torch.Tensor | None = None, scale: torch.Tensor | None = None) -> torch.Tensor:
    """The DeltaNet output at decode in one kernel: gated RMSNorm (chapter 17_deltanet_layer), out_proj, residual add.

    x:           [T, heads, DV], the delta rule's output; DV a power of two (128)
    z:           [T, heads, DV], the output gate (a view of in_proj's output: each token's row contiguous)
    norm_weight: [DV], the gated norm's plain scale
    weight:      [N, heads * DV] (out_proj, 1024 x 2048), x's dtype
    residual:    [T, N], the stream; out: optional [T, N] in residual's dtype (`out=residual`: in place)
    Made for one token: each token is a row of the grid that reads the whole weight (the engine keeps the
    separate kernels for prompts).
    scale:       with an 8-bit weight (int8 or float8_e4m3fn), its fp32 scales [N], one a row; one token only
    """
    validate.tensor(x, "x", dtype=validate.FLOATS, ndim=3)
    T, HV, DV = x.shape
    if DV & (DV - 1):
        raise ValueError(f"x's head dim {DV} must be a power of two (the kernel splits a tile into heads)")
    validate.tensor(z, "z", dtype=x.dtype, shape=(T, HV, DV), contiguous=False)
    validate.token_rows(z, "z")
    _check_norm(norm_weight, DV, eps)
    K = validate.scaled_projection(x.view(T, HV * DV), weight, scale)                 # [T, heads * DV]
    N = weight.shape[0]
    validate.tensor(residual, "residual", dtype=validate.FLOATS, shape=(T, N))
    device = validate.same_device(x=x, z=z, norm_weight=norm_weight, weight=weight, residual=residual)
    out = validate.output(out, "out", (T, N), residual.dtype, device)
    validate.disjoint({"out": out},
                      {"x": x, "z": z, "norm_weight": norm_weight, "weight": weight, "residual": residual},
                      same=("residual",))
    if T == 0:
        return out
    pdl = pdl_args()
    cfg = gemv_residual_config(N, K, runtime().interpreted, pdl["PDL"])
    block_k = max(cfg["BLOCK_K"], DV)                                                 # whole heads per tile
    warps = cfg["num_warps"] if pdl["PDL"] else max(1, min(16, cfg["BLOCK_N"] * block_k // 512))
    gated_norm_gemv_residual_kernel[(triton.cdiv(N, cfg["BLOCK_N"]), T)](
        x, z, norm_weight, weight, residual, out, N, K, HV * DV, z.stride(0), eps, DV=DV,
        BLOCK_N=cfg["BLOCK_N"], BLOCK_K=block_k, UNROLL=cfg["UNROLL"] if block_k == cfg["BLOCK_K"] else 0,
        num_warps=warps, **pdl, **_scale_args(scale))
    return out

