"""Fusion, the norm in the projection (chapter 21_norm_fusion): operators the model runs back to back, done in one
kernel each.

    residual + RMSNorm          h = residual + x; normed = rms_norm(h)       (ln2, and ln1 of the next layer)
    RMSNorm + projection        y = rms_norm(x) @ W.T                         (ln1 + qkv, ln2 + gate/up)
    gate/up + SwiGLU            y = silu(x @ Wg.T) * (x @ Wu.T)               (the MLP's first half)
    RMSNorm + gate/up + SwiGLU  the two above at once
    RMSNorm + in_proj + conv    the DeltaNet in-projection at decode, the conv's step in its epilogue

At decode (one token) each removed kernel is a launch saved, about a microsecond inside a CUDA graph,
while the bytes saved (the intermediate written and read again) are a few KB: the launch is the prize.

The norm folds into a projection because its statistic is one scalar per token:

    y[n] = sum_k W[n, k] * x[k] * inv_rms * (1 + w[k]) = inv_rms * sum_k W[n, k] * (x[k] * (1 + w[k]))

so a program scales the x tile by (1 + w) as it loads it, accumulates sum(x^2) from the same tile beside
the dot product, and multiplies its outputs by inv_rms = rsqrt(sum(x^2) / K + eps) at the end. Every
program recomputes the statistic of the whole row: K more multiply-adds on a vector it loads anyway, no
extra memory traffic. The alternative, a first pass that writes inv_rms for all programs to read, is
either a second launch (the cost fusion removes) or a grid-wide wait inside one kernel. The statistic
must cover the whole row: the loop accumulates it over every K tile and applies it after the loop.

- Decode: `fused_gemv_kernel`, chapter 05_projections's GEMV (a program owns BLOCK_N rows of W and walks K) with
  two compile-time options: HAS_NORM folds the RMSNorm in, GATED reads the matching rows of a second
  weight (up) and stores silu(gate) * up. A third, CONV, runs the DeltaNet conv's step on the outputs
  that feed it: a program owns those channels whole, their state included.
- Prefill: `fused_gemm_kernel`, chapter 05_projections's tensor-core GEMM with the same two options: the x tile is
  scaled by (1 + w) in fp32 and rounded to the input dtype before `tl.dot` (as the model rounds its
  normed activations), each row's sum of squares accumulates beside it, and the epilogue applies inv_rms
  and the SwiGLU.
- `residual_rms_norm_kernel`: one program per row (or a few short rows) adds, stores the new residual
  stream, and normalises the stored values: the unfused pair's second read of the stream disappears.
The residual add in the projections' epilogues and the per-head kernels: solutions/layer_fusion.py
(chapter 22_layer_fusion).
8-bit weights (chapter 31_weight_quant, the fast level's decode): the GEMV's W_SCALED reads int8 or fp8 weights
with one fp32 scale a row; the scale multiplies the row's sum once, where the wrappers' `scale=` asks for it.
"""

import torch
import triton
import triton.language as tl

from tritonllm_course import tma_gemm, triton_helpers as helpers, validate
from tritonllm_course.runtime import pdl_args, runtime
from tritonllm_course.triton_helpers import pdl_enter, pdl_launch_dependents, pdl_wait, silu

SMS = 132                    # streaming multiprocessors of an H200: the GEMV grid is sized against them
ELEMENTS_PER_PROGRAM = 1024  # residual + norm: a program holds about this many elements of its rows
MAX_DIM = 32768              # residual + norm keep a whole row in registers


@triton.jit
def residual_rms_norm_kernel(x_ptr, res_ptr, w_ptr, h_ptr, out_ptr, rows, dim, eps,
                             BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, PDL: tl.constexpr = False):
    """h = residual + x (stored in h's dtype); out = h / rms(h) * (1 + w); packed [rows, dim] tensors."""
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    # BEGIN SOLUTION: rows r = program_id * BLOCK_M + [0, BLOCK_M) of packed [rows, dim] tensors;
    #   load x and residual as fp32, add, store h in h's dtype;
    #   then normalise the stored h (rounded back to fp32): h * rsqrt(mean(h^2) + eps) * (1 + w), stored in out's dtype
    r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)             # [BLOCK_M] row indices
    c = tl.arange(0, BLOCK_D)                                           # [BLOCK_D] column indices
    mask = (r < rows)[:, None] & (c < dim)[None, :]                     # [BLOCK_M, BLOCK_D]
    offsets = r.to(tl.int64)[:, None] * dim + c[None, :]
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    res = tl.load(res_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    h = (res + x).to(h_ptr.dtype.element_ty)                            # one rounding, as PyTorch's add
    tl.store(h_ptr + offsets, h, mask=mask)
    # the norm reads the stream as it was stored: the same numbers as the add-then-norm pair
    h = h.to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(h * h, axis=1) / dim + eps)                # [BLOCK_M]
    w = tl.load(w_ptr + c, mask=c < dim, other=0.0).to(tl.float32)      # [BLOCK_D]
    y = h * inv_rms[:, None] * (1.0 + w)[None, :]
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)
    # END SOLUTION


@triton.jit
def conv_window_load(state_ptr, w_ptr, c, C, KC: tl.constexpr):
    """Channels c [R] (those < C) of a depthwise conv of width KC with its state [C, KC] (the last KC
    inputs, newest last): returns (window [R, KC]: columns 0..KC-2 the state's columns 1..KC-1, the
    last one 0 until the new input arrives; the conv weights [R, KC])."""
    i = tl.arange(0, KC)                                                                # [KC]
    ok = (c < C)[:, None]
    window = tl.load(state_ptr + c[:, None] * KC + (i + 1)[None, :], mask=ok & (i < KC - 1)[None, :],
                     other=0.0)                                                         # [R, KC]
    return window, tl.load(w_ptr + c[:, None] * KC + i[None, :], mask=ok, other=0.0)


@triton.jit
def conv_window_step(y_ptr, state_ptr, window, conv_w, c, C, KC: tl.constexpr):
    """The conv's step on the new inputs y[c] (as stored: the conv reads what the projection wrote):
    the window completed and written back as the new state, y[c] = silu(sum_i conv_w[c, i] * window[i])."""
    i = tl.arange(0, KC)
    ok = c < C
    x = tl.load(y_ptr + c, mask=ok, other=0.0)                                          # [R]
    window = tl.where((i == KC - 1)[None, :], x[:, None], window)                       # [R, KC]
    tl.store(state_ptr + c[:, None] * KC + i[None, :], window, mask=ok[:, None])
    conv = tl.sum(window.to(tl.float32) * conv_w.to(tl.float32), axis=1)                # [R]
    tl.store(y_ptr + c, silu(conv).to(y_ptr.dtype.element_ty), mask=ok)


@triton.jit
def weight_tiles(w_ptr, up_w_ptr, row_start, row_ok, k0, K, GATED: tl.constexpr, BLOCK_K: tl.constexpr):
    """The [BLOCK_N, BLOCK_K] tiles of W at columns k0 .. k0 + BLOCK_K (GATED: and W_up's; else W's again),
    in the weights' dtype. Each weight is read exactly once: evict_first keeps it from pushing x out of the
    caches."""
    k = k0 + tl.arange(0, BLOCK_K)
    tile = row_start[:, None] + k[None, :]                                                  # [BLOCK_N, BLOCK_K]
    tile_ok = row_ok[:, None] & (k < K)[None, :]
    w = tl.load(w_ptr + tile, mask=tile_ok, other=0.0, eviction_policy="evict_first")
    up = w
    if GATED:
        up = tl.load(up_w_ptr + tile, mask=tile_ok, other=0.0, eviction_policy="evict_first")
    return w, up


@triton.jit
def fused_gemv_step(x_ptr, norm_w_ptr, w, up, k0, K, acc, acc_up, sum_sq,
                    HAS_NORM: tl.constexpr, GATED: tl.constexpr, BLOCK_K: tl.constexpr):
    """One step of the fused GEMV's walk along K, columns k0 .. k0 + BLOCK_K: the x tile as fp32 (HAS_NORM:
    its squares added to sum_sq [BLOCK_K], then scaled by 1 + norm_w), its products with the weight tile w
    (GATED: and up, W_up's) added to acc (acc_up) [BLOCK_N, BLOCK_K]. Returns (acc, acc_up, sum_sq)."""
    # BEGIN SOLUTION: columns k = k0 + arange(BLOCK_K) masked to K;
    #   x as fp32 (HAS_NORM: sum_sq += x^2 before x *= 1 + norm_w);
    #   the tile(s) w (and up) as fp32 times x, added to acc (and acc_up if GATED)
    k = k0 + tl.arange(0, BLOCK_K)
    k_ok = k < K
    x = tl.load(x_ptr + k, mask=k_ok, other=0.0).to(tl.float32)                            # [BLOCK_K]
    if HAS_NORM:
        sum_sq += x * x                                    # the statistic of the WHOLE row, tile by tile
        x = x * (1.0 + tl.load(norm_w_ptr + k, mask=k_ok, other=0.0).to(tl.float32))
    acc += w.to(tl.float32) * x[None, :]
    if GATED:
        acc_up += up.to(tl.float32) * x[None, :]
    return acc, acc_up, sum_sq
    # END SOLUTION


@triton.jit
def fused_gemv_kernel(x_ptr, norm_w_ptr, w_ptr, up_w_ptr, y_ptr, N, K, eps, conv_w_ptr, conv_state_ptr, C,
                      HAS_NORM: tl.constexpr, GATED: tl.constexpr,
                      BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, CONV: tl.constexpr = False,
                      KC: tl.constexpr = 4, UNROLL: tl.constexpr = 0, PDL: tl.constexpr = False,
                      W_SCALED: tl.constexpr = False, scale_ptr=None, up_scale_ptr=None):
    """One token: y[n] for this program's BLOCK_N outputs. x [K]; W, W_up [N, K]; y [N].

    y[n] = sum_k W[n, k] x[k]; HAS_NORM: x is first RMS-normalised with weight (1 + norm_w);
    GATED: y[n] = silu(that sum) * (the same sum over W_up's row n).
    UNROLL: K again, as a compile-time constant, to unroll the walk along K (0: a loop over the run-time K;
    `fused_gemv_config` chooses). Unrolled, every step's loads can be in flight at once, where a loop
    issues each step's loads only after the step before has used its own: one memory round trip per step
    instead of one in all, for the registers that hold them.
    CONV (the DeltaNet in-projection): outputs n < C go on through the depthwise conv's step, y[n] =
    silu(sum_i conv_w[n, i] * window[n, i]), their state [C, KC] rolled in place.
    PDL (programmatic dependent launch, chapter 18_cuda_graphs): the next kernel may launch at once; the first step's
    weight tiles (with PDL the whole walk is one step) are loaded before the wait for the kernel that
    wrote x: no kernel writes weights, so they stream in while that kernel still runs.
    W_SCALED (8-bit weights, chapter 31_weight_quant): W and W_up hold int8 or fp8 and scale_ptr, up_scale_ptr
    their fp32 scales [N], one a row. The tiles convert to fp32 exactly in the walk; each row's sum is
    multiplied by its row's scale once, after the walk: y[n] = s[n] * sum_k q[n, k] x[k]. There the scale
    commutes with inv_rms (a factor of the token, not of the row), but not with the SwiGLU: gate and up
    take their own scales before silu. Off, the scale code is not compiled.
    """
    if PDL:
        pdl_launch_dependents()
    # K as a constant where the walk is unrolled: its masks and offsets fold at compile time too
    KK = UNROLL if UNROLL > 0 else K
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    row_start = rows.to(tl.int64) * KK                     # int64: N * K passes 2**31 for the LM head
    w, up = weight_tiles(w_ptr, up_w_ptr, row_start, row_ok, 0, KK, GATED, BLOCK_K)     # the first step's
    if W_SCALED:    # weights too: loaded before the wait
        w_scale = tl.load(scale_ptr + rows, mask=row_ok, other=0.0)
        up_scale = w_scale
        if GATED:
            up_scale = tl.load(up_scale_ptr + rows, mask=row_ok, other=0.0)
    if PDL:
        pdl_wait()              # from here on x and the conv state are the previous kernels' stores
    if CONV:    # the conv's state and taps depend on no output: loaded before the walk
        conv_rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        window, conv_w = conv_window_load(conv_state_ptr, conv_w_ptr, conv_rows, C, KC)
    # BEGIN SOLUTION: fp32 accumulators (one partial sum per lane: acc, acc_up [BLOCK_N, BLOCK_K], sum_sq [BLOCK_K]);
    #   the walk, one fused_gemv_step per BLOCK_K columns, the first with the tiles w, up loaded above, each
    #   later one with its own weight_tiles: tl.static_range(0, UNROLL, BLOCK_K) if UNROLL > 0 (UNROLL is K:
    #   masks and offsets fold), else step 0 then range(BLOCK_K, K, BLOCK_K);
    #   then row sums (W_SCALED: times w_scale, up's times up_scale), times rsqrt(sum(x^2) / K + eps) if
    #   HAS_NORM, silu(gate) * up if GATED; store
    # one fp32 partial sum per lane, reduced once after the walk (acc_up, sum_sq: unused unless GATED, HAS_NORM)
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    sum_sq = tl.zeros([BLOCK_K], dtype=tl.float32)
    if UNROLL > 0:      # unrolled: every step's loads in flight together
        for k0 in tl.static_range(0, UNROLL, BLOCK_K):
            if k0 > 0:
                w, up = weight_tiles(w_ptr, up_w_ptr, row_start, row_ok, k0, KK, GATED, BLOCK_K)
            acc, acc_up, sum_sq = fused_gemv_step(x_ptr, norm_w_ptr, w, up, k0, KK, acc, acc_up, sum_sq,
                                                  HAS_NORM, GATED, BLOCK_K)
    else:               # a loop: one memory round trip per step
        acc, acc_up, sum_sq = fused_gemv_step(x_ptr, norm_w_ptr, w, up, 0, KK, acc, acc_up, sum_sq,
                                              HAS_NORM, GATED, BLOCK_K)
        for k0 in range(BLOCK_K, K, BLOCK_K):
            w, up = weight_tiles(w_ptr, up_w_ptr, row_start, row_ok, k0, KK, GATED, BLOCK_K)
            acc, acc_up, sum_sq = fused_gemv_step(x_ptr, norm_w_ptr, w, up, k0, KK, acc, acc_up, sum_sq,
                                                  HAS_NORM, GATED, BLOCK_K)
    y = tl.sum(acc, axis=1)                                                                 # [BLOCK_N]
    if W_SCALED:    # the row's dequantizing scale, once; before the SwiGLU, which it does not commute with
        y = y * w_scale
    if HAS_NORM:
        inv_rms = tl.rsqrt(tl.sum(sum_sq, axis=0) / KK + eps)  # only now is the row's statistic complete
        y = y * inv_rms
    if GATED:
        up = tl.sum(acc_up, axis=1)
        if W_SCALED:
            up = up * up_scale
        if HAS_NORM:
            up = up * inv_rms
        y = silu(y) * up
    tl.store(y_ptr + rows, y.to(y_ptr.dtype.element_ty), mask=row_ok)
    # END SOLUTION
    if CONV:
        tl.debug_barrier()      # every thread's outputs stored before any thread reads them back
        conv_window_step(y_ptr, conv_state_ptr, window, conv_w, conv_rows, C, KC)


@triton.jit
def fused_gemm_kernel(x_ptr, norm_w_ptr, w_ptr, up_w_ptr, y_ptr, M, N, K, eps,
                      HAS_NORM: tl.constexpr, GATED: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      PDL: tl.constexpr = False):
    """Several tokens: the BLOCK_M x BLOCK_N tile of y = x @ W.T with the same options as the GEMV.

    x [M, K]; W, W_up [N, K]; y [M, N]. Given complete: read it to see the GEMV's ideas on tensor cores.
    """
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    pid_m = tl.program_id(0)      # axis 0 is M: the programs sharing a weight tile run side by side (L2)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < M
    n_ok = rn < N
    x_tile = rm[:, None].to(tl.int64) * K + rk[None, :]                  # [BLOCK_M, BLOCK_K]
    w_tile = rn[None, :].to(tl.int64) * K + rk[:, None]                  # [BLOCK_K, BLOCK_N]: W read as W.T
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    if GATED:
        acc_up = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    if HAS_NORM:
        sum_sq = tl.zeros([BLOCK_M], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + rk) < K
        a = tl.load(x_ptr + x_tile + k0, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        if HAS_NORM:
            a32 = a.to(tl.float32)
            sum_sq += tl.sum(a32 * a32, axis=1)
            scale = 1.0 + tl.load(norm_w_ptr + k0 + rk, mask=k_ok, other=0.0).to(tl.float32)
            # back to the input dtype for the tensor cores: one rounding, as the model's normed activations
            a = (a32 * scale[None, :]).to(x_ptr.dtype.element_ty)
        b_ok = k_ok[:, None] & n_ok[None, :]
        b = tl.load(w_ptr + w_tile + k0, mask=b_ok, other=0.0)
        # "ieee": fp32 inputs are multiplied in full fp32, not rounded to tf32 (no effect on bf16/fp16)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        if GATED:
            b_up = tl.load(up_w_ptr + w_tile + k0, mask=b_ok, other=0.0)
            acc_up = tl.dot(a, b_up, acc_up, input_precision="ieee")
    if HAS_NORM:
        inv_rms = tl.rsqrt(sum_sq / K + eps)[:, None]                    # [BLOCK_M, 1]
        acc = acc * inv_rms
        if GATED:
            acc_up = acc_up * inv_rms
    if GATED:
        acc = silu(acc) * acc_up
    y_tile = y_ptr + rm[:, None].to(tl.int64) * N + rn[None, :]
    tl.store(y_tile, acc.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


MAX_UNROLLED_STEPS = 8      # the longest walk along K the fused GEMV unrolls


def fused_gemv_config(N: int, K: int, interpreted: bool = False, norm: bool = False,
                      gated: bool = False, conv: bool = False, pdl: bool = False) -> dict:
    """Launch parameters of the fused GEMV for an [N, K] weight (gated: N rows in each of two weights).

    Chapter 05_projections's config without the norm; with it, four rows a program in steps of 256, to share the
    norm's extra loads (`lab/gemv_sweep.py`), eight gated (`lab/unrolled_gemv_probe.py`). The walk along K
    unrolled up to MAX_UNROLLED_STEPS steps, but not with the conv's epilogue: its registers
    (`lab/unrolled_gemv_probe.py`). Under the CPU interpreter 64 x 64 tiles, so small shapes still take several
    K steps.
    With PDL the whole walk is one step (`triton_helpers.pdl_gemv_config`): every weight load is issued
    before the wait (`lab/pdl_chain_probe.py`).
    """
    if pdl and not interpreted and (tile := helpers.pdl_gemv_config(K)):
        return {**tile, "UNROLL": K}
    if interpreted:
        cfg = {"BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4}
    else:
        block_n = 2
        many_programs = triton.cdiv(N, block_n) >= 64 * SMS
        if norm and not many_programs:
            cfg = {"BLOCK_N": 8 if gated else 4, "BLOCK_K": min(256, max(16, triton.next_power_of_2(K))),
                   "num_warps": 4 if gated else 2}
        else:
            block_k = min(512 if many_programs else 2048, max(16, triton.next_power_of_2(K)))
            cfg = {"BLOCK_N": block_n, "BLOCK_K": block_k,
                   "num_warps": max(1, block_n * block_k // (16 * 32))}
    steps = triton.cdiv(K, cfg["BLOCK_K"])
    return {**cfg, "UNROLL": K if steps <= MAX_UNROLLED_STEPS and not conv else 0}


def fused_gemm_config(M: int, N: int, K: int, gated: bool, dtype: torch.dtype, device: torch.device) -> dict:
    """Launch parameters of the fused GEMM (tensor-core tiles, every side >= 16): ungated, chapter 05_projections's
    tiles for its wide matrices (the in-projections); gated (two accumulators, two weight tiles), 64-column tiles,
    64-row ones near M = 128 (112 programs for 132 SMs). Stages capped by shared memory. Measured:
    `lab/prefill_probe.py`.
    """
    if not helpers.gpu_launch(device):   # the interpreter: few, large tiles
        return {"BLOCK_M": min(64, max(16, triton.next_power_of_2(M))), "BLOCK_N": 64, "BLOCK_K": 64,
                "num_warps": 4, "num_stages": 1}
    block_m = min(128, max(16, triton.next_power_of_2(M)))
    if gated:
        cfg = ({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3} if M >= 256 else
               {"BLOCK_M": min(64, block_m), "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4, "num_stages": 4})
    elif M >= 256:
        cfg = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}
    else:
        cfg = {"BLOCK_M": block_m, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 8, "num_stages": 4}
    weight_tiles = 2 if gated else 1
    stage_bytes = (cfg["BLOCK_M"] + weight_tiles * cfg["BLOCK_N"]) * cfg["BLOCK_K"] * dtype.itemsize
    cfg["num_stages"] = max(1, min(cfg["num_stages"], _max_shared_memory(device.index or 0) // stage_bytes))
    return cfg


def _max_shared_memory(device_index: int) -> int:
    """Shared memory a block may use on that CUDA device, or on the GPU compiled for (`triton_helpers`)."""
    return helpers.shared_memory(device_index)


def _project(x, weight, up_weight, norm_weight, eps, out, conv=None, scales=None):
    """Launch the fused GEMV (one token) or GEMM (several) on validated arguments; returns out.
    conv = (conv_weight [C, KC], conv_state [C, KC]): the conv's step on outputs 0..C-1 (one token only).
    scales = (scale [N], up's scale [N] or None): 8-bit weights' row scales (one token only)."""
    K, N = x.shape[-1], weight.shape[0]
    M = x.shape[:-1].numel()                    # not -1, which an empty K or N leaves undetermined
    x2, out2 = x.reshape(M, K), out.view(M, N)                          # [M, K], [M, N]
    if M == 0 or N == 0:
        return out
    if K == 0:                                  # sums of no term (a norm of none is refused): silu(0) * 0 = 0
        return out.zero_()
    has_norm, gated = norm_weight is not None, up_weight is not None
    weights = (weight, up_weight) if gated else (weight,)
    if M > 1 and not has_norm and tma_gemm.usable(x2, *weights):   # sm_90 on, long prompts: the TMA's copies
        tma_gemm.launch(x2, weight, out2, up=up_weight, pdl=pdl_args())
        return out
    # pointers the options leave unused still need a tensor; the kernel never reads them
    norm_weight = weight if norm_weight is None else norm_weight
    up_weight = weight if up_weight is None else up_weight
    conv_weight, conv_state = (weight, weight) if conv is None else conv
    C, KC = (0, 4) if conv is None else conv_weight.shape
    if M == 1:
        pdl = pdl_args()
        cfg = fused_gemv_config(N, K, runtime().interpreted, norm=has_norm, gated=gated, conv=conv is not None,
                                pdl=pdl["PDL"])
        fused_gemv_kernel[(triton.cdiv(N, cfg["BLOCK_N"]),)](
            x2, norm_weight, weight, up_weight, out2, N, K, eps, conv_weight, conv_state, C, HAS_NORM=has_norm,
            GATED=gated, BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], CONV=conv is not None, KC=KC,
            UNROLL=cfg["UNROLL"], num_warps=cfg["num_warps"], **pdl, **_scale_args(scales))
    else:
        cfg = fused_gemm_config(M, N, K, gated, x.dtype, x.device)
        grid = (triton.cdiv(M, cfg["BLOCK_M"]), triton.cdiv(N, cfg["BLOCK_N"]))
        fused_gemm_kernel[grid](
            x2, norm_weight, weight, up_weight, out2, M, N, K, eps, HAS_NORM=has_norm, GATED=gated,
            BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"],
            num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **pdl_args())
    return out


def _scale_args(scales) -> dict:
    """The GEMV's arguments for 8-bit weights' row scales (scale, up's scale or None); none for weights in the
    model dtype, whose kernel then compiles without the scale code."""
    if scales is None:
        return {}
    scale, up_scale = scales
    return {"W_SCALED": True, "scale_ptr": scale, "up_scale_ptr": scale if up_scale is None else up_scale}


def _check_norm(norm_weight: torch.Tensor, K: int, eps: float, name: str = "norm_weight") -> None:
    """The norm's weight and eps; K = 0 refused (the RMS of no element is 0 / 0), as `rms_norm` refuses it."""
    if K == 0:
        raise ValueError("x's last dim, the normalised dim, is 0: the RMS of no element is undefined")
    validate.tensor(norm_weight, name, dtype=validate.FLOATS, shape=(K,))
    validate.positive(eps, "eps")


def _split_merged(gate_up_weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[W_gate; W_up] -> the two [I, K] halves (contiguous views, no copy)."""
    if gate_up_weight.shape[0] % 2:
        raise ValueError(f"gate_up_weight has shape {list(gate_up_weight.shape)}; its first dim must be "
                         "2 * I (W_gate stacked over W_up)")
    return gate_up_weight.chunk(2, dim=0)                               # [I, K] each


def rms_norm_linear(x: torch.Tensor, norm_weight: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                    out: torch.Tensor | None = None, scale: torch.Tensor | None = None) -> torch.Tensor:
    """`linear(rms_norm(x, norm_weight, eps), weight)` in one kernel: ln1 + in_proj, ln2 + gate/up.

    x:           [..., K] float (one token [1, 1024] at decode), contiguous, weight's dtype
    norm_weight: [K], the zero-centred norm's offset from 1 (any float dtype)
    weight:      [N, K] row-major (merged projections: 5120 or 8224 x 1024)
    out:         optional [..., N] buffer in x's dtype
    The normed activations are never written: fp32 inside the GEMV; one rounding to x's dtype before the
    tensor cores in the GEMM (several tokens).
    scale:       with an 8-bit weight (int8 or float8_e4m3fn), its fp32 scales [N], one a row; one token only
                 (`validate.scaled_projection`)
    """
    K = validate.scaled_projection(x, weight, scale)
    _check_norm(norm_weight, K, eps)
    device = validate.same_device(x=x, norm_weight=norm_weight, weight=weight)
    out = validate.output(out, "out", (*x.shape[:-1], weight.shape[0]), x.dtype, device)
    validate.disjoint({"out": out}, {"x": x, "norm_weight": norm_weight, "weight": weight})
    return _project(x, weight, None, norm_weight, eps, out, scales=None if scale is None else (scale, None))


def rms_norm_linear_conv(x: torch.Tensor, norm_weight: torch.Tensor, weight: torch.Tensor,
                         conv_weight: torch.Tensor, conv_state: torch.Tensor, eps: float = 1e-6,
                         out: torch.Tensor | None = None, scale: torch.Tensor | None = None) -> torch.Tensor:
    """The DeltaNet in-projection of one token with the conv's step in its epilogue: `rms_norm_linear`,
    then outputs 0..C-1 (q, k, v: the conv's channels) go through `conv1d_decode`'s step + SiLU.

    x [1, K]; norm_weight [K]; weight [N, K] (the merged in-projection, N = 8224); conv_weight [C, KC]
    (C <= N); conv_state [C, KC] in x's dtype, rolled in place; out optional [1, N] in x's dtype.
    Returns out: [silu(conv(q, k, v)) | z | b | a]. A program owns whole output rows, so it owns those
    channels' conv state too: no other program reads it, and no second launch is needed. q and k are
    left un-normalised: the L2 norm needs a whole head, which the recurrent kernel holds
    (`gated_delta_rule_recurrent_gates(..., qk_norm=True)`).
    scale: with an 8-bit weight (int8 or float8_e4m3fn), its fp32 scales [N], one a row (`validate.scaled_projection`).
    """
    K = validate.scaled_projection(x, weight, scale)
    _check_norm(norm_weight, K, eps)
    if x.shape[0] != 1 or x.dim() != 2:
        raise ValueError(f"x has shape {list(x.shape)}: the conv's state rolls one step per call, so give "
                         "one token [1, K]")
    validate.tensor(conv_weight, "conv_weight", dtype=validate.FLOATS, ndim=2)
    C, KC = conv_weight.shape
    if C > weight.shape[0] or KC < 2 or KC & (KC - 1):
        raise ValueError(f"conv_weight has shape {list(conv_weight.shape)}: need C <= {weight.shape[0]} "
                         "(the projection's outputs) and a power-of-two width >= 2 (Qwen3.5: 4)")
    validate.tensor(conv_state, "conv_state", dtype=x.dtype, shape=(C, KC))
    device = validate.same_device(x=x, norm_weight=norm_weight, weight=weight, conv_weight=conv_weight,
                                  conv_state=conv_state)
    out = validate.output(out, "out", (1, weight.shape[0]), x.dtype, device)
    validate.disjoint({"out": out}, {"x": x, "norm_weight": norm_weight, "weight": weight, "conv_weight": conv_weight,
                                     "conv_state": conv_state})
    return _project(x, weight, None, norm_weight, eps, out, conv=(conv_weight, conv_state),
                    scales=None if scale is None else (scale, None))


def gate_up_swiglu(x: torch.Tensor, gate_weight: torch.Tensor, up_weight: torch.Tensor,
                   out: torch.Tensor | None = None) -> torch.Tensor:
    """`silu(x @ gate_weight.T) * (x @ up_weight.T)` in one kernel: gate and up never reach memory.

    x:                      [..., K] float, contiguous, the weights' dtype
    gate_weight, up_weight: [I, K] each (3584 x 1024), same dtype
    out:                    optional [..., I] buffer in x's dtype
    """
    validate.projection(x, gate_weight, "gate_weight")
    validate.tensor(up_weight, "up_weight", dtype=gate_weight.dtype, shape=tuple(gate_weight.shape))
    device = validate.same_device(x=x, gate_weight=gate_weight, up_weight=up_weight)
    out = validate.output(out, "out", (*x.shape[:-1], gate_weight.shape[0]), x.dtype, device)
    validate.disjoint({"out": out}, {"x": x, "gate_weight": gate_weight, "up_weight": up_weight})
    return _project(x, gate_weight, up_weight, None, 0.0, out)


def gate_up_swiglu_merged(x: torch.Tensor, gate_up_weight: torch.Tensor,
                          out: torch.Tensor | None = None) -> torch.Tensor:
    """The same with the engine's stacked weight [W_gate; W_up] ([2 * I, K] = [7168, 1024])."""
    validate.projection(x, gate_up_weight, "gate_up_weight")
    gate_weight, up_weight = _split_merged(gate_up_weight)
    return gate_up_swiglu(x, gate_weight, up_weight, out)


def rms_norm_gate_up_swiglu(x: torch.Tensor, norm_weight: torch.Tensor, gate_up_weight: torch.Tensor,
                            eps: float = 1e-6, out: torch.Tensor | None = None,
                            scale: torch.Tensor | None = None) -> torch.Tensor:
    """ln2 + gate/up + SwiGLU in one kernel: `silu(n @ Wg.T) * (n @ Wu.T)` with n = rms_norm(x).

    x:              [..., K] float, contiguous, the weight's dtype (the residual stream h)
    norm_weight:    [K], post_attention_layernorm's offset from 1
    gate_up_weight: [2 * I, K], W_gate stacked over W_up
    out:            optional [..., I] buffer in x's dtype
    scale:          with an 8-bit gate_up_weight, its fp32 row scales [2 * I] (one token only)
    """
    K = validate.scaled_projection(x, gate_up_weight, scale, "gate_up_weight")
    _check_norm(norm_weight, K, eps)
    gate_weight, up_weight = _split_merged(gate_up_weight)
    device = validate.same_device(x=x, norm_weight=norm_weight, gate_up_weight=gate_up_weight,
                                  **({} if scale is None else {"scale": scale}))
    out = validate.output(out, "out", (*x.shape[:-1], gate_weight.shape[0]), x.dtype, device)
    validate.disjoint({"out": out}, {"x": x, "norm_weight": norm_weight, "gate_up_weight": gate_up_weight})
    return _project(x, gate_weight, up_weight, norm_weight, eps, out,
                    scales=None if scale is None else scale.chunk(2))       # [I] each: gate's rows, up's


def residual_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                      h_out: torch.Tensor | None = None, out: torch.Tensor | None = None):
    """`h = residual + x; normed = rms_norm(h, weight, eps)` in one pass. Returns (h, normed).

    x:        [..., hidden] float, contiguous: the sublayer's output, in the model dtype
    residual: same shape, x's dtype or float32 (an fp32 residual stream, the fp16 mode)
    weight:   [hidden], the zero-centred norm's offset from 1 (any float dtype)
    h_out:    the new residual stream, residual's dtype; may be `residual` itself (updated in place:
              each element is read before it is written, by the same program)
    out:      the normalised copy for the next projection, in x's dtype (the model dtype)
    """
    validate.tensor(x, "x", dtype=validate.FLOATS)
    stream_dtypes = (x.dtype,) if x.dtype == torch.float32 else (x.dtype, torch.float32)
    validate.tensor(residual, "residual", dtype=stream_dtypes, shape=tuple(x.shape))
    if x.dim() == 0:
        raise ValueError("x must have a last (hidden) dimension; got a 0-d tensor")
    dim = x.shape[-1]
    validate.tensor(weight, "weight", dtype=validate.FLOATS, shape=(dim,))
    if not 0 < dim <= MAX_DIM:
        raise ValueError(f"the hidden dim is {dim}; this kernel keeps a row in registers and supports 1 to "
                         f"{MAX_DIM}")
    validate.positive(eps, "eps")
    device = validate.same_device(x=x, residual=residual, weight=weight)
    h_out = validate.output(h_out, "h_out", tuple(x.shape), residual.dtype, device)
    out = validate.output(out, "out", tuple(x.shape), x.dtype, device)
    validate.disjoint({"h_out": h_out, "out": out},
                      {"x": x, "residual": residual, "weight": weight}, same=("x", "residual"))
    rows = x.numel() // dim
    if rows == 0:
        return h_out, out
    block_d = triton.next_power_of_2(dim)
    block_m = min(max(1, ELEMENTS_PER_PROGRAM // block_d), triton.next_power_of_2(rows))
    num_warps = min(16, max(1, block_m * block_d // 256))    # 8 elements (16 bytes of bf16) per thread
    residual_rms_norm_kernel[(triton.cdiv(rows, block_m),)](
        x, residual, weight, h_out, out, rows, dim, eps, BLOCK_M=block_m, BLOCK_D=block_d,
        num_warps=num_warps, **pdl_args())
    return h_out, out
