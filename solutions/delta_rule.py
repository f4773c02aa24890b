"""The gated delta rule (chapters 15_delta_rule and 16_delta_rule_chunked): the memory of Qwen3.5's 18 DeltaNet layers.

Per value head a state S [key_dim, value_dim] (fp32) is updated for every token t:
    S = exp(g_t) S;   u = beta_t (v_t - S^T k_t);   S = S + k_t u^T;   o_t = S^T q_t
Value head j reads key head j // (value_heads / key_heads). Shapes, token-major as the model has them:
q, k [T, H, DK] (L2-normalised, q also scaled by DK^-0.5), v [T, HV, DV], g and beta [T, HV], state
[HV, DK, DV] fp32.

Two ways to compute it:
- `gated_delta_rule_recurrent` (decode): one program per (value head, block of BV value columns) keeps
  its [DK, BV] slice of S in registers, loops over the tokens, and reads and writes S once. At T = 1 the
  whole cost is moving the 1 MiB state in and out, so the value columns are split over many programs.
- `gated_delta_rule_chunked` (prefill): chunks of C tokens turned into matrix products, in three
  kernels: (1) per chunk, in parallel, the UT transform T = (I + A)^-1 and the WY representation
  w = T (beta exp(gamma) k), u = T (beta v); (2) per value head and block of value columns, the scan
  over chunks in order: v_new = u - w S, S = exp(gamma_C) S + (exp(gamma_C - gamma) k)^T v_new;
  (3) per chunk, in parallel, o = exp(gamma) q S + (lower(q k^T) * Gamma) v_new. At chunks of 64 (from 512
  tokens) kernel 1 runs as two: the UT transform, then w and u.

Both take `initial_state` and write `final_state` (which may be the same tensor: every program reads its
slice of the state before it writes it), so a chunked prefill hands its state to the recurrent decode.
q, k and v may be token-strided views (the model splits them out of one projection): each token's
[heads, dim] block must be contiguous.
Precision: elementwise arithmetic and every accumulation are fp32; the state is fp32 throughout. In the
scan and the output kernels the tiles that only feed tl.dot (q, k, w, v_new, the chunk-start states) go
to the tensor cores in the storage dtype, the fp32 operand rounded to it: bf16/fp16 products for bf16/fp16
inputs, three tf32 passes (about fp32) for fp32 inputs, which the CPU interpreter computes exactly. u is
read as fp32 (v_new = u - w S is elementwise). The first kernel multiplies fp32 tiles (its k and v are also
scaled elementwise): tf32 products for bf16/fp16 inputs, three tf32 passes for fp32 ones. Split in two (chunks
of 64) its k k^T, w and u products take storage-dtype tiles (the inverse's block products stay fp32) and the UT
transform is stored in that dtype, as flash-linear-attention stores it.
"""
import torch
import triton
import triton.language as tl

from tritonllm_course import validate
from tritonllm_course.runtime import pdl_args
from tritonllm_course.triton_helpers import pdl_enter, sigmoid, silu, softplus

CHUNK_SIZES = (16, 32, 64)
MAX_HEAD_DIM = 256          # a [DK, BV] state slice and [C, DK] tiles must fit in registers
SUB = tl.constexpr(16)      # the UT transform inverts 16 x 16 diagonal blocks first


# --- decode: the recurrence, state in registers ---------------------------------------------------
@triton.jit
def delta_rule_step(S, q, k, v, g, beta):
    """One token of the gated delta rule on a state slice S [BK, BV] (fp32; q, k [BK], v [BV], g and beta
    scalars, all fp32): forget (decay by exp(g)), correct what S predicts for k by beta times the error,
    then read with q. Returns (S, o [BV]). Used by the recurrent kernel below and by chapter 22_layer_fusion's fused
    one."""
    # BEGIN SOLUTION: decay S by exp(g); u = beta (v - S^T k); S += k u^T; o = S^T q
    S = S * tl.exp(g)                                        # forget a little
    u = beta * (v - tl.sum(S * k[:, None], axis=0))          # the prediction's error for k: [BV]
    S = S + k[:, None] * u[None, :]                          # write it: rank-1 update
    o = tl.sum(S * q[:, None], axis=0)                       # read with the updated state: [BV]
    return S, o
    # END SOLUTION


@triton.jit
def recurrent_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, s0_ptr, o_ptr, st_ptr, T, sq, sk, sv,
                     H: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
                     BK: tl.constexpr, BV: tl.constexpr, HAS_S0: tl.constexpr):
    hv = tl.program_id(0)                      # value head
    h = hv // (HV // H)                        # the key head it reads
    rk = tl.arange(0, BK)                      # all key dims (BK = DK rounded up to a power of two)
    rv = tl.program_id(1) * BV + tl.arange(0, BV)   # this program's value columns
    mk, mv = rk < DK, rv < DV
    state = hv * DK * DV + rk[:, None] * DV + rv[None, :]   # [BK, BV] offsets into [HV, DK, DV]
    smask = mk[:, None] & mv[None, :]
    # BEGIN SOLUTION: S = the [BK, BV] state slice (zeros without s0);
    #   per token t: its q, k, v (fp32), g and beta; delta_rule_step; store o in o's dtype; store S
    if HAS_S0:
        S = tl.load(s0_ptr + state, mask=smask, other=0.0)
    else:
        S = tl.zeros([BK, BV], dtype=tl.float32)
    for t in range(T):
        q = tl.load(q_ptr + t * sq + h * DK + rk, mask=mk, other=0.0).to(tl.float32)
        k = tl.load(k_ptr + t * sk + h * DK + rk, mask=mk, other=0.0).to(tl.float32)
        v = tl.load(v_ptr + t * sv + hv * DV + rv, mask=mv, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + t * HV + hv)
        beta = tl.load(beta_ptr + t * HV + hv).to(tl.float32)
        S, o = delta_rule_step(S, q, k, v, g, beta)
        tl.store(o_ptr + (t * HV + hv) * DV + rv, o.to(o_ptr.dtype.element_ty), mask=mv)
    tl.store(st_ptr + state, S, mask=smask)
    # END SOLUTION


# --- prefill, kernel 1: the UT transform and the WY representation, one program per chunk ------------
@triton.jit
def unit_lower_inverse(A, C: tl.constexpr, NC: tl.constexpr, PREC: tl.constexpr):
    """(I + A)^-1 for a strictly lower-triangular [C, C] block A (C = NC * 16), in fp32.

    Write I + A = (I + D)(I + N): D the 16 x 16 diagonal blocks, N = (I + D)^-1 (A - D). The diagonal
    blocks are inverted by forward substitution, all NC of them at once in a [NC, 16, 16] view; N is
    strictly block-lower (N^NC = 0), so (I + N)^-1 = I - N (I - N (I - ...)) takes NC - 1 products.
    """
    r4 = tl.arange(0, NC)[:, None, None, None]
    c4 = tl.arange(0, NC)[None, None, :, None]
    same4 = r4 == c4                                             # [NC, 1, NC, 1]: same diagonal block
    A4 = tl.reshape(A, [NC, SUB, NC, SUB])                       # A4[b, i, b', j] = A[16b + i, 16b' + j]
    Y = -tl.sum(tl.where(same4, A4, 0.0), axis=2)                # [NC, 16, 16]: minus the diagonal blocks
    row = tl.arange(0, SUB)[None, :, None]
    # BEGIN SOLUTION: forward substitution on every diagonal block at once:
    #   row i of Y = a + sum_j a_j Y[j] where a = row i of -A (rows 0 and 1 are already right)
    for i in range(2, SUB):
        a = tl.sum(tl.where(row == i, Y, 0.0), axis=1)           # [NC, 16]: row i of each block
        a = a + tl.sum(a[:, :, None] * Y, axis=1)                # rows j < i of Y are final
        Y = tl.where(row == i, a[:, None, :], Y)
    # END SOLUTION
    Y = Y + (row == tl.arange(0, SUB)[None, None, :]).to(tl.float32)     # (I + D_b)^-1 per block
    Td4 = tl.where(same4, tl.expand_dims(Y, 2), 0.0)             # [NC, 16, NC, 16], block-diagonal
    Td = tl.reshape(Td4, [C, C])                                 # (I + D)^-1
    if NC > 1:
        rc = tl.arange(0, C)
        eye = (rc[:, None] == rc[None, :]).to(tl.float32)
        N = tl.dot(Td, tl.where(rc[:, None] // SUB > rc[None, :] // SUB, A, 0.0), input_precision=PREC)
        X = eye
        for _ in tl.static_range(NC - 1):
            X = eye - tl.dot(N, X, input_precision=PREC)
        Td = tl.dot(X, Td, input_precision=PREC)
    return Td


@triton.jit
def chunk_ut_transform(k, g, beta, C: tl.constexpr, NC: tl.constexpr, PREC: tl.constexpr):
    """A chunk's log-decays from its start, gamma [C], and its UT transform Tm = (I + A)^-1 [C, C], both fp32,
    from its keys k [C, BK] (fp32, or 16-bit: the product accumulates in fp32 either way), g and beta [C]
    (zeros past the prompt's end: the padding adds nothing)."""
    # BEGIN SOLUTION: gamma = cumsum(g); A = strictly_lower(beta_i k_i.k_j exp(gamma_i - gamma_j));
    #   Tm = unit_lower_inverse(A, C, NC, PREC)
    gamma = tl.cumsum(g, axis=0)                                 # log-decay from the chunk start
    i, j = tl.arange(0, C)[:, None], tl.arange(0, C)[None, :]
    decay = tl.exp(tl.minimum(gamma[:, None] - gamma[None, :], 0.0))   # Gamma_ij (i > j: <= 1)
    A = tl.where(i > j, tl.dot(k, tl.trans(k), input_precision=PREC) * beta[:, None] * decay, 0.0)
    Tm = unit_lower_inverse(A, C, NC, PREC)
    # END SOLUTION
    return gamma, Tm


@triton.jit
def wy_product(Tm, x, gamma, beta, KEYS: tl.constexpr, PREC: tl.constexpr):
    """The WY representation's rows for one chunk, fp32: w = Tm (beta exp(gamma) k) when KEYS (x = k [C, BK]),
    else u = Tm (beta v) (x = v [C, BV]). The scaled tile is rounded to Tm's dtype for the product."""
    # BEGIN SOLUTION: the scale per token (beta exp(gamma) for the keys, beta for the values)
    if KEYS:
        scale = beta * tl.exp(gamma)
    else:
        scale = beta
    # END SOLUTION
    return tl.dot(Tm, (x.to(tl.float32) * scale[:, None]).to(Tm.dtype), input_precision=PREC)


@triton.jit
def chunk_gates(g_ptr, beta_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, sa, sb, rc, mt, hv, HV: tl.constexpr,
                GATES: tl.constexpr, STORE_G: tl.constexpr):
    """g and beta [C] (fp32, zero past T) of the chunk's tokens rc for value head hv. GATES: chapter
    14_gates_l2norm's gates from the projection's a and b (token-strided), where they are used; g goes to
    the fp32 workspace `g` for the later kernels when STORE_G (one program per (chunk, head) writes it), and
    is read back from it otherwise. Without GATES, g and beta are read."""
    if GATES:
        beta = tl.where(mt, sigmoid(tl.load(b_ptr + rc * sb + hv, mask=mt, other=0.0).to(tl.float32)), 0.0)
        if STORE_G:
            a = tl.load(a_ptr + rc * sa + hv, mask=mt, other=0.0).to(tl.float32)
            decay_rate = -tl.exp(tl.load(A_log_ptr + hv).to(tl.float32))
            g = tl.where(mt, decay_rate * softplus(a + tl.load(dt_bias_ptr + hv).to(tl.float32)), 0.0)
            tl.store(g_ptr + rc * HV + hv, g, mask=mt)
        else:
            g = tl.load(g_ptr + rc * HV + hv, mask=mt, other=0.0)
    else:
        g = tl.load(g_ptr + rc * HV + hv, mask=mt, other=0.0)    # padding: g = 0, beta = 0, k = 0
        beta = tl.load(beta_ptr + rc * HV + hv, mask=mt, other=0.0).to(tl.float32)
    return g, beta


@triton.jit(do_not_specialize=["T"])
def chunk_prepare_kernel(k_ptr, v_ptr, g_ptr, beta_ptr, w_ptr, u_ptr, T, sk, sv,
                         a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, sa, sb,
                         H: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
                         BK: tl.constexpr, BV: tl.constexpr, C: tl.constexpr, NC: tl.constexpr,
                         PREC: tl.constexpr, GATES: tl.constexpr = False, PDL: tl.constexpr = False):
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    n, hv = tl.program_id(0), tl.program_id(1)                   # chunk, value head
    h = hv // (HV // H)
    rc = n * C + tl.arange(0, C)                                 # the chunk's tokens
    rk, rv = tl.arange(0, BK), tl.arange(0, BV)
    mt, mk, mv = rc < T, rk < DK, rv < DV
    g, beta = chunk_gates(g_ptr, beta_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, sa, sb, rc, mt, hv, HV,
                          GATES, True)
    k = tl.load(k_ptr + rc[:, None] * sk + h * DK + rk[None, :], mask=mt[:, None] & mk[None, :],
                other=0.0).to(tl.float32)                        # [C, BK]
    v = tl.load(v_ptr + rc[:, None] * sv + hv * DV + rv[None, :], mask=mt[:, None] & mv[None, :],
                other=0.0).to(tl.float32)                        # [C, BV]
    gamma, Tm = chunk_ut_transform(k, g, beta, C, NC, PREC)     # Tm: the UT transform (I + A)^-1
    w = wy_product(Tm, k, gamma, beta, True, PREC)               # [C, BK]
    u = wy_product(Tm, v, gamma, beta, False, PREC)              # [C, BV]
    tl.store(w_ptr + (rc[:, None] * HV + hv) * DK + rk[None, :], w.to(w_ptr.dtype.element_ty),
             mask=mt[:, None] & mk[None, :])
    tl.store(u_ptr + (rc[:, None] * HV + hv) * DV + rv[None, :], u.to(u_ptr.dtype.element_ty),
             mask=mt[:, None] & mv[None, :])


# --- prefill, kernel 1 split in two (chunks of 64): the UT transform, then w and u ----------------------
# At chunks of 64 one program holding k, v, A, Tm, w and u in fp32 is the slowest part of the rule. Split as
# flash-linear-attention splits it, the products on the storage dtype's operands (fp32 accumulation), the
# rule took 191.7 us<!-- fig:lab.delta_operands_h100.t4096.split64.us --> at 4,096 tokens on an H100 against
# 259.3 us<!-- fig:lab.delta_operands_h100.t4096.engine.us --> for the unsplit kernel at chunks of 32, beat
# chunks of 32 at every length from 512 and was the fastest of the course's forms tried from 1,024 (at 512 one
# 16-bit launch at 64 took 32.6<!-- fig:lab.delta_operands_h100.t512.p16_64.us --> against
# 33.5 us<!-- fig:lab.delta_operands_h100.t512.split64.us -->; flash-linear-attention took
# 177.7 us<!-- fig:lab.delta_operands_h100.t4096.fla.us --> at 4,096; lab/delta_rule_operands_probe.py, its
# record of 2026-12-06). The same helpers as `chunk_prepare_kernel`, so one check covers both.
@triton.jit(do_not_specialize=["T"])
def chunk_inverse_kernel(k_ptr, g_ptr, beta_ptr, ai_ptr, T, sk, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, sa, sb,
                         H: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, BK: tl.constexpr,
                         C: tl.constexpr, NC: tl.constexpr, PREC: tl.constexpr, GATES: tl.constexpr = False,
                         PDL: tl.constexpr = False):
    """Program (chunk n, value head hv): Tm into ai [T, HV, C] in its dtype (row i of the chunk's Tm at token
    i); with GATES also g into its workspace."""
    pdl_enter(PDL)
    n, hv = tl.program_id(0), tl.program_id(1)
    h = hv // (HV // H)
    rc = n * C + tl.arange(0, C)
    rk = tl.arange(0, BK)
    mt = rc < T
    g, beta = chunk_gates(g_ptr, beta_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, sa, sb, rc, mt, hv, HV,
                          GATES, True)
    k = tl.load(k_ptr + rc[:, None] * sk + h * DK + rk[None, :], mask=mt[:, None] & (rk < DK)[None, :],
                other=0.0)                                       # [C, BK] as stored
    Tm = chunk_ut_transform(k, g, beta, C, NC, PREC)[1]
    rj = tl.arange(0, C)
    tl.store(ai_ptr + (rc[:, None] * HV + hv) * C + rj[None, :], Tm.to(ai_ptr.dtype.element_ty), mask=mt[:, None])


@triton.jit
def _wy_store(Tm, x_ptr, sx, head, out_ptr, gamma, beta, rc, mt, hv, HV: tl.constexpr, D: tl.constexpr,
              BD: tl.constexpr, KEYS: tl.constexpr, PREC: tl.constexpr):
    """out[rc, hv] = `wy_product` of the chunk's rows of x[:, head] ([T, heads, D] at token stride sx), as
    stored: w from the keys (KEYS), u from the values."""
    cols = tl.arange(0, BD)
    m = mt[:, None] & (cols < D)[None, :]
    x = tl.load(x_ptr + rc[:, None] * sx + head * D + cols[None, :], mask=m, other=0.0)      # [C, BD]
    y = wy_product(Tm, x, gamma, beta, KEYS, PREC)
    tl.store(out_ptr + (rc[:, None] * HV + hv) * D + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=m)


@triton.jit(do_not_specialize=["T"])
def chunk_wu_kernel(k_ptr, v_ptr, g_ptr, beta_ptr, ai_ptr, w_ptr, u_ptr, T, sk, sv, b_ptr, sb,
                    H: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, BK: tl.constexpr,
                    BV: tl.constexpr, C: tl.constexpr, PREC: tl.constexpr, GATES: tl.constexpr = False,
                    PDL: tl.constexpr = False):
    """Program (chunk n, value head hv, which): which = 0 writes the chunk's w, which = 1 its u, from the Tm
    `chunk_inverse_kernel` stored (g read back from its workspace with GATES)."""
    pdl_enter(PDL)
    n, hv, which = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    h = hv // (HV // H)
    rc = n * C + tl.arange(0, C)
    mt = rc < T
    g, beta = chunk_gates(g_ptr, beta_ptr, b_ptr, b_ptr, b_ptr, b_ptr, sb, sb, rc, mt, hv, HV, GATES, False)
    gamma = tl.cumsum(g, axis=0)
    rj = tl.arange(0, C)
    Tm = tl.load(ai_ptr + (rc[:, None] * HV + hv) * C + rj[None, :], mask=mt[:, None], other=0.0)   # [C, C]
    if which == 0:
        _wy_store(Tm, k_ptr, sk, h, w_ptr, gamma, beta, rc, mt, hv, HV, DK, BK, True, PREC)
    else:
        _wy_store(Tm, v_ptr, sv, hv, u_ptr, gamma, beta, rc, mt, hv, HV, DV, BV, False, PREC)


# --- prefill, kernel 2: the state scan over chunks, in order ------------------------------------------
# This loop is the only sequential part of the prefill, so it is kept lean: w, u and k go straight from
# memory into the tensor-core products in their storage dtype (bf16/fp16; the compiler prefetches the next
# chunk's tiles while this one computes), the fp32 state is rounded to that dtype as the other operand, and
# everything else (the decays, v_new, the state itself) stays fp32. k is cast to w's dtype: with fp32 k
# (the engine's L2-normed keys) and bf16 w, Triton 3.6 built a kernel that faulted on an H200 ("out-of-
# range shared address" in the k^T v_new product); one operand dtype per loop is also the tested path.
# T and NT are not specialised: Triton turns an int argument equal to 1 into a constant, and with NT = 1
# (a prompt of one chunk) Triton 3.6 compiled a scan that faulted or left a wrong final state on an H200.
@triton.jit(do_not_specialize=["T", "NT"])
def chunk_scan_kernel(k_ptr, w_ptr, u_ptr, g_ptr, s0_ptr, hs_ptr, vn_ptr, st_ptr, T, NT, sk,
                      H: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
                      BK: tl.constexpr, BV: tl.constexpr, C: tl.constexpr, HAS_S0: tl.constexpr,
                      PREC: tl.constexpr, PDL: tl.constexpr = False):
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    hv = tl.program_id(0)
    h = hv // (HV // H)
    rk = tl.arange(0, BK)
    rv = tl.program_id(1) * BV + tl.arange(0, BV)
    mk, mv = rk < DK, rv < DV
    tile = rk[:, None] * DV + rv[None, :]                        # [BK, BV] offsets in one [DK, DV] state
    smask = mk[:, None] & mv[None, :]
    if HAS_S0:
        S = tl.load(s0_ptr + hv * DK * DV + tile, mask=smask, other=0.0)
    else:
        S = tl.zeros([BK, BV], dtype=tl.float32)
    for n in range(NT):
        rc = n * C + tl.arange(0, C)
        mt = rc < T
        g = tl.load(g_ptr + rc * HV + hv, mask=mt, other=0.0)
        w = tl.load(w_ptr + (rc[:, None] * HV + hv) * DK + rk[None, :], mask=mt[:, None] & mk[None, :],
                    other=0.0)                                   # [C, BK], fed to tl.dot as stored
        u = tl.load(u_ptr + (rc[:, None] * HV + hv) * DV + rv[None, :], mask=mt[:, None] & mv[None, :],
                    other=0.0).to(tl.float32)                    # [C, BV]
        k = tl.load(k_ptr + rc[:, None] * sk + h * DK + rk[None, :], mask=mt[:, None] & mk[None, :],
                    other=0.0).to(w_ptr.dtype.element_ty)        # [C, BK], in w's dtype (see below)
        # BEGIN SOLUTION: store S as chunk n's start state (hs[n, hv], offsets `tile`);
        #   v_new = u - w S (store it in vn); S = exp(gamma_C) S + k^T (exp(gamma_C - gamma) v_new);
        #   tl.dot operands in w's / k's dtype
        tl.store(hs_ptr + (n * HV + hv) * DK * DV + tile, S.to(hs_ptr.dtype.element_ty), mask=smask)
        gamma = tl.cumsum(g, axis=0)
        gamma_last = tl.sum(g, axis=0)                           # padding has g = 0
        v_new = u - tl.dot(w, S.to(w.dtype), input_precision=PREC)   # what S does not already predict
        tl.store(vn_ptr + (rc[:, None] * HV + hv) * DV + rv[None, :], v_new.to(vn_ptr.dtype.element_ty),
                 mask=mt[:, None] & mv[None, :])
        v_decayed = v_new * tl.exp(gamma_last - gamma)[:, None]  # each write decays to the chunk's end
        S = S * tl.exp(gamma_last) + tl.dot(tl.trans(k), v_decayed.to(k.dtype), input_precision=PREC)
        # END SOLUTION
    tl.store(st_ptr + hv * DK * DV + tile, S, mask=smask)


# --- prefill, kernel 3: the output, one program per (chunk, value block) -----------------------------
@triton.jit(do_not_specialize=["T"])
def chunk_output_kernel(q_ptr, k_ptr, g_ptr, hs_ptr, vn_ptr, o_ptr, T, sq, sk, z_ptr, nw_ptr, sz, eps,
                        H: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
                        BK: tl.constexpr, BV: tl.constexpr, C: tl.constexpr, PREC: tl.constexpr,
                        GATED_NORM: tl.constexpr = False, PDL: tl.constexpr = False):
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    n, hv = tl.program_id(0), tl.program_id(1)
    h = hv // (HV // H)
    rc = n * C + tl.arange(0, C)
    rk = tl.arange(0, BK)
    rv = tl.program_id(2) * BV + tl.arange(0, BV)
    mt, mk, mv = rc < T, rk < DK, rv < DV
    # q, k, the chunk-start state and v_new only feed tensor-core products: loaded as stored
    # (in v_new's dtype, like the scan's operands: one tensor-core dtype per kernel)
    q = tl.load(q_ptr + rc[:, None] * sq + h * DK + rk[None, :], mask=mt[:, None] & mk[None, :],
                other=0.0).to(vn_ptr.dtype.element_ty)           # [C, BK]
    k = tl.load(k_ptr + rc[:, None] * sk + h * DK + rk[None, :], mask=mt[:, None] & mk[None, :],
                other=0.0).to(vn_ptr.dtype.element_ty)           # [C, BK]
    S = tl.load(hs_ptr + (n * HV + hv) * DK * DV + rk[:, None] * DV + rv[None, :],
                mask=mk[:, None] & mv[None, :], other=0.0)       # [BK, BV] chunk-start state
    v_new = tl.load(vn_ptr + (rc[:, None] * HV + hv) * DV + rv[None, :], mask=mt[:, None] & mv[None, :],
                    other=0.0)                                   # [C, BV]
    g = tl.load(g_ptr + rc * HV + hv, mask=mt, other=0.0)
    # BEGIN SOLUTION: o = exp(gamma) * (q S) + (lower_incl(q k^T) * Gamma) v_new
    gamma = tl.cumsum(g, axis=0)
    i, j = tl.arange(0, C)[:, None], tl.arange(0, C)[None, :]
    decay = tl.exp(tl.minimum(gamma[:, None] - gamma[None, :], 0.0))
    P = tl.where(i >= j, tl.dot(q, tl.trans(k), input_precision=PREC) * decay, 0.0)   # [C, C], fp32
    o = (tl.dot(q, S.to(q.dtype), input_precision=PREC) * tl.exp(gamma)[:, None]
         + tl.dot(P.to(v_new.dtype), v_new, input_precision=PREC))
    # END SOLUTION
    if GATED_NORM:  # chapter 17_deltanet_layer's gated RMSNorm on whole heads (BV >= DV), of o as it would be stored
        o = o.to(o_ptr.dtype.element_ty).to(tl.float32)
        z = tl.load(z_ptr + rc[:, None] * sz + hv * DV + rv[None, :], mask=mt[:, None] & mv[None, :],
                    other=0.0).to(tl.float32)                    # [C, BV]
        inv_rms = tl.rsqrt(tl.sum(o * o, axis=1) / DV + eps)     # [C]: padding lanes are 0
        o = o * inv_rms[:, None] * tl.load(nw_ptr + rv, mask=mv, other=0.0).to(tl.float32)[None, :] * silu(z)
    tl.store(o_ptr + (rc[:, None] * HV + hv) * DV + rv[None, :], o.to(o_ptr.dtype.element_ty),
             mask=mt[:, None] & mv[None, :])


# --- host wrappers ----------------------------------------------------------------------------------
def _check(q, k, v, g, beta, initial_state, out, final_state):
    """Validate every argument; returns (T, H, HV, DK, DV, device, out, final_state)."""
    T, H, HV, DK, DV = validate.delta_rule_qkv(q, k, v, MAX_HEAD_DIM)
    validate.tensor(g, "g (log-decay)", dtype=torch.float32, shape=(T, HV))
    validate.tensor(beta, "beta", dtype=validate.FLOATS, shape=(T, HV))
    if initial_state is not None:
        validate.tensor(initial_state, "initial_state", dtype=torch.float32, shape=(HV, DK, DV))
    device = validate.same_device(q=q, k=k, v=v, g=g, beta=beta, initial_state=initial_state)
    out = validate.output(out, "out", (T, HV, DV), v.dtype, device)
    final_state = validate.output(final_state, "final_state", (HV, DK, DV), torch.float32, device)
    validate.disjoint({"out": out, "final_state": final_state},
                      {"q": q, "k": k, "v": v, "g": g, "beta": beta, "initial_state": initial_state},
                      same={"final_state": "initial_state"})
    return T, H, HV, DK, DV, device, out, final_state


def _pow2(n: int) -> int:
    return max(SUB.value, triton.next_power_of_2(n))


def gated_delta_rule_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                               beta: torch.Tensor, initial_state: torch.Tensor | None = None,
                               out: torch.Tensor | None = None, final_state: torch.Tensor | None = None,
                               block_v: int = 16, num_warps: int = 4):
    """The delta rule token by token (decode). Returns (out [T, HV, DV] in v's dtype, final_state fp32).

    q, k [T, H, DK] (L2-normalised, q scaled by DK^-0.5); v [T, HV, DV]; g [T, HV] fp32 log-decay;
    beta [T, HV]; initial_state [HV, DK, DV] fp32 or None (zeros). final_state may be initial_state
    (updated in place). block_v value columns per program: HV * DV / block_v programs (16 x 8 = 128 at
    Qwen3.5-0.8B's shapes: 3.2 us<!-- fig:code.delta_rule.recurrent.default.us --> a step on the H200; every
    split from 4 to 32 columns took
    3.2<!-- fig:code.delta_rule.recurrent.splits.min_us -->-4.0 us<!-- fig:code.delta_rule.recurrent.splits.max_us -->;
    results/delta_rule_nvidia-h200_2026-11-29.json).
    """
    T, H, HV, DK, DV, _, out, final_state = _check(q, k, v, g, beta, initial_state, out, final_state)
    if validate.check_count(block_v, "block_v") not in (4, 8, 16, 32, 64):   # 16.0 passed `in`, to fail in the launch
        raise ValueError(f"block_v must be 4, 8, 16, 32 or 64, got {block_v}")
    validate.warps(num_warps)
    grid = (HV, triton.cdiv(DV, block_v))
    recurrent_kernel[grid](q, k, v, g, beta, initial_state, out, final_state, T, q.stride(0), k.stride(0),
                           v.stride(0), H=H, HV=HV, DK=DK, DV=DV, BK=_pow2(DK), BV=block_v,
                           HAS_S0=initial_state is not None, num_warps=num_warps)
    return out, final_state


def _precision(dtype) -> str:
    # tl.dot of fp32 tiles defaults to tf32 (10-bit mantissa) on NVIDIA; fp32 inputs ask for three tf32
    # passes (about fp32 accuracy), 16-bit inputs are no more precise than tf32 anyway
    return "tf32x3" if dtype == torch.float32 else "tf32"


def prepare_block_k(DK: int) -> int:
    """Key tiles of kernel 1 (either form): 32 columns at least, masked past DK. With 16-column ones, fp32 and
    chunks of 64, Triton 3.6 built a kernel whose UT-transform product read past its shared memory on an H100
    (compute-sanitizer, 2026-12-05: tests/kernels/test_delta_rule.py::test_small_key_heads_in_fp32)."""
    return max(32, _pow2(DK))


def chunk_prepare(k, v, g, beta, chunk_size, gates=None):
    """Kernel 1 on validated inputs: the WY keys w [T, HV, DK] and values u [T, HV, DV] (v's dtype).
    gates = (a, b, A_log, dt_bias): beta and g computed from them in the kernel, g written into `g`
    (`beta` unused)."""
    T, H, DK = k.shape
    HV, DV = v.shape[1:]
    w = torch.empty(T, HV, DK, dtype=v.dtype, device=v.device)
    u = torch.empty(T, HV, DV, dtype=v.dtype, device=v.device)
    a, b, A_log, dt_bias = gates if gates is not None else (g, g, g, g)   # unused pointers: any tensor
    chunk_prepare_kernel[(triton.cdiv(T, chunk_size), HV)](
        k, v, g, beta, w, u, T, k.stride(0), v.stride(0), a, b, A_log, dt_bias, a.stride(0), b.stride(0),
        H=H, HV=HV, DK=DK, DV=DV, BK=prepare_block_k(DK), BV=_pow2(DV), C=chunk_size, NC=chunk_size // SUB.value,
        PREC=_precision(v.dtype), GATES=gates is not None, num_warps=8, **pdl_args())
    return w, u


def chunk_prepare_split(k, v, g, beta, chunk_size, gates=None):
    """`chunk_prepare` in two launches with the products on v's dtype (fp32 accumulation): the UT transform
    into a [T, HV, chunk_size] workspace in v's dtype (`chunk_inverse_kernel`), then w and u, one program per
    chunk, value head and output (`chunk_wu_kernel`). What chunks of `SPLIT_CHUNK` run."""
    T, H, DK = k.shape
    HV, DV = v.shape[1:]
    a, b, A_log, dt_bias = gates if gates is not None else (g, g, g, g)   # unused pointers: any tensor
    grid, BK, prec = (triton.cdiv(T, chunk_size), HV), prepare_block_k(DK), _precision(v.dtype)
    ai = torch.empty(T, HV, chunk_size, dtype=v.dtype, device=v.device)
    chunk_inverse_kernel[grid](k, g, beta, ai, T, k.stride(0), a, b, A_log, dt_bias, a.stride(0), b.stride(0),
                               H=H, HV=HV, DK=DK, BK=BK, C=chunk_size, NC=chunk_size // SUB.value, PREC=prec,
                               GATES=gates is not None, num_warps=4, **pdl_args())
    w = torch.empty(T, HV, DK, dtype=v.dtype, device=v.device)
    u = torch.empty(T, HV, DV, dtype=v.dtype, device=v.device)
    chunk_wu_kernel[(*grid, 2)](k, v, g, beta, ai, w, u, T, k.stride(0), v.stride(0), b, b.stride(0), H=H, HV=HV,
                                DK=DK, DV=DV, BK=BK, BV=_pow2(DV), C=chunk_size, PREC=prec,
                                GATES=gates is not None, num_warps=4, **pdl_args())
    return w, u


# The scan's launch parameters: one program per (value head, value block) walks every chunk in turn, so its
# time is that walk's latency. Four stages keep more chunks' tiles in flight: the fastest launch at chunks of 64
# at every length from 512 tokens on an H100, 3%<!-- fig:lab.delta_split_h100.t4096.scan_4w4s_gain.pct --> at
# 4,096 (lab/delta_rule_kernels_probe.py, its _split record of 2026-12-06); at chunks of 32 level with the
# default three. One stage miscompiled at chunks of 64 (Triton 3.6).
SCAN_LAUNCH = {"num_warps": 4, "num_stages": 4}


def chunk_scan(k, w, u, g, initial_state, final_state, chunk_size, block_v):
    """Kernel 2: the chunk-start states [NT, HV, DK, DV] and v_new [T, HV, DV], both in u's dtype (the
    state itself is carried in fp32); writes final_state."""
    T, H, DK = k.shape
    HV, DV = u.shape[1:]
    NT, BV = triton.cdiv(T, chunk_size), min(block_v, _pow2(DV))
    starts = torch.empty(NT, HV, DK, DV, dtype=u.dtype, device=u.device)
    v_new = torch.empty_like(u)
    chunk_scan_kernel[(HV, triton.cdiv(DV, BV))](
        k, w, u, g, initial_state, starts, v_new, final_state, T, NT, k.stride(0), H=H, HV=HV, DK=DK,
        DV=DV, BK=_pow2(DK), BV=BV, C=chunk_size, HAS_S0=initial_state is not None,
        PREC=_precision(u.dtype), **SCAN_LAUNCH, **pdl_args())
    return starts, v_new


def chunk_output(q, k, g, starts, v_new, out, chunk_size, norm=None):
    """Kernel 3: o for every chunk in parallel, into `out`. norm = (z, norm_weight, eps): the gated RMSNorm
    of each head applied before the store (a program then holds whole heads)."""
    T, H, DK = q.shape
    HV, DV = v_new.shape[1:]
    BV = _pow2(DV) if norm is not None else min(64, _pow2(DV))
    z, norm_weight, eps = norm if norm is not None else (out, out, 1.0)   # unused pointers: any tensor
    chunk_output_kernel[(triton.cdiv(T, chunk_size), HV, triton.cdiv(DV, BV))](
        q, k, g, starts, v_new, out, T, q.stride(0), k.stride(0), z, norm_weight, z.stride(0), eps, H=H, HV=HV,
        DK=DK, DV=DV, BK=_pow2(DK), BV=BV, C=chunk_size, PREC=_precision(v_new.dtype),
        GATED_NORM=norm is not None, num_warps=4, **pdl_args())
    return out


SPLIT_CHUNK = 64      # chunks of this size run the first kernel split in two (`chunk_prepare_split`)
SPLIT_FROM = 512      # tokens: chunks of 64 from here (lab/delta_rule_operands_probe.py)


def chunk_prepare_for(chunk_size: int):
    """Kernel 1's form at this chunk size: `chunk_prepare_split` at `SPLIT_CHUNK`, else `chunk_prepare`."""
    return chunk_prepare_split if chunk_size == SPLIT_CHUNK else chunk_prepare


def chunk_size_for(T: int) -> int:
    """The chunk size for a T-token prompt: 16 up to 128 tokens, 32 below `SPLIT_FROM`, 64 from it. Small
    chunks make more programs for the parallel kernels and a cheaper UT transform; the scan, the one
    sequential loop, takes T / C steps, which is what makes 16 lose on long prompts (`lab/prefill_probe.py`).
    Chunks of 64 with the split first kernel beat 32 at every length measured from 512 tokens on an H100
    (`lab/delta_rule_operands_probe.py`: 512 to 4,096); at 128 and 256 tokens 16 and 32 stay the fastest
    (`lab/delta_rule_kernels_probe.py`, its short run)."""
    return 16 if T <= 128 else 32 if T < SPLIT_FROM else SPLIT_CHUNK


def gated_delta_rule_chunked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                             beta: torch.Tensor, initial_state: torch.Tensor | None = None,
                             out: torch.Tensor | None = None, final_state: torch.Tensor | None = None,
                             chunk_size: int | None = None, block_v: int = 16):
    """The delta rule in chunks of `chunk_size` tokens (prefill); same arguments and results as
    `gated_delta_rule_recurrent`. Three launches: the UT transform per chunk (`chunk_prepare`; two
    launches at chunks of 64, `chunk_prepare_split`), the state scan per (value head, `block_v` value
    columns) (`chunk_scan`), the output per (chunk, value head, 64 value columns) (`chunk_output`).
    Workspaces are in v's dtype, the state in fp32. chunk_size: 16, 32 or 64; None picks by T (`chunk_size_for`)."""
    out, final_state = _check(q, k, v, g, beta, initial_state, out, final_state)[-2:]
    return _chunked(q, k, v, g, beta, None, initial_state, out, final_state, chunk_size, block_v)


def _chunked(q, k, v, g, beta, gates, initial_state, out, final_state, chunk_size, block_v, norm=None):
    """The three (at chunks of 64, four) kernels on validated inputs (chunk_size None: by T)."""
    chunk_size = chunk_size_for(q.shape[0]) if chunk_size is None else chunk_size
    if validate.check_count(chunk_size, "chunk_size") not in CHUNK_SIZES:       # 64.0 passed `in`, as 16.0 did
        raise ValueError(f"chunk_size must be one of {CHUNK_SIZES}, got {chunk_size}")
    if validate.check_count(block_v, "block_v") not in (16, 32, 64):
        raise ValueError(f"block_v must be 16, 32 or 64, got {block_v}")
    if q.dtype != v.dtype:        # the products pair q and k with v-dtype tiles: one dtype throughout
        q, k = q.to(v.dtype), k.to(v.dtype)
    w, u = chunk_prepare_for(chunk_size)(k, v, g, beta, chunk_size, gates)
    starts, v_new = chunk_scan(k, w, u, g, initial_state, final_state, chunk_size, block_v)
    chunk_output(q, k, g, starts, v_new, out, chunk_size, norm)
    return out, final_state


def gated_delta_rule_chunked_gates(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor,
                                   b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor,
                                   initial_state: torch.Tensor | None = None, out: torch.Tensor | None = None,
                                   final_state: torch.Tensor | None = None, g: torch.Tensor | None = None,
                                   z: torch.Tensor | None = None, norm_weight: torch.Tensor | None = None,
                                   eps: float = 1e-6, chunk_size: int | None = None, block_v: int = 16):
    """`gated_delta_rule_chunked` with the DeltaNet gates (chapter 14_gates_l2norm) computed inside its first kernel:
    a, b [T, HV] (the in-projection's outputs, tokens at any stride), A_log, dt_bias [HV] instead of g and
    beta. beta never reaches memory; g, which the other two kernels read, goes to the workspace `g`
    ([T, HV] fp32, allocated when None). Returns (out, final_state) as `gated_delta_rule_chunked`.
    With z [T, HV, DV] (contiguous within a token, any token stride) and norm_weight [DV], out is the
    output after chapter 17_deltanet_layer's gated RMSNorm (`gated_rms_norm(o, z, norm_weight, eps)`), applied in the
    last kernel's epilogue."""
    T, H, HV, DK, DV, device, out, final_state = validate.delta_rule_gate_inputs(
        q, k, v, a, b, A_log, dt_bias, initial_state, out, final_state, MAX_HEAD_DIM)
    g = validate.output(g, "g", (T, HV), torch.float32, device)
    validate.disjoint({"g": g}, {"q": q, "k": k, "v": v, "a": a, "b": b, "out": out, "final_state": final_state})
    norm = None
    if z is not None or norm_weight is not None:
        if z is None or norm_weight is None:
            raise ValueError("the gated norm needs both z and norm_weight (or neither)")
        validate.tensor(z, "z", dtype=v.dtype, shape=(T, HV, DV), contiguous=False)
        validate.token_rows(z, "z")
        validate.tensor(norm_weight, "norm_weight", dtype=validate.FLOATS, shape=(DV,))
        validate.same_device(q=q, z=z, norm_weight=norm_weight)
        validate.positive(eps, "eps")
        norm = (z, norm_weight, eps)
    return _chunked(q, k, v, g, g, (a, b, A_log, dt_bias), initial_state, out, final_state, chunk_size,
                    block_v, norm)
