"""The chunked delta rule at chunks of 64 with the UT transform done block by block: faster than fla?

    python -m lab.delta_rule_prepare_probe [OUTDIR]    (on a GPU; fla importable for its row; PROBE_S bounds
                                                       it, default 200)

Question: lab/delta_rule_kernels_probe.py found the course's rule a few percent behind flash-linear-
attention's at 2,048 and 4,096 tokens, the gap in the state scan, whose sequential loop takes T / C steps.
At chunks of 64 the course's scan takes half the steps and was level with fla's (which runs chunks of 64),
and its output kernel was faster, but its first kernel (the UT transform, w and u) grew by more than the
other two saved (lab/results/delta_rule_kernels_probe_nvidia-h100-80gb-hbm3_2026-12-06.json):
`unit_lower_inverse` inverts (I + A) for a 64 x 64 A with five dense 64 x 64 products (its Neumann series,
most of whose blocks are zero). fla inverts the four 16 x 16 diagonal blocks and builds the six blocks below
them from those (`solve_tril`), in a kernel of its own.
With that inverse, is the first kernel at chunks of 64 as fast as at 32, and the rule at chunks of 64 then
faster than fla's from 512 tokens on?
Method: `blocked_prepare_kernel` below, one program per (chunk of 64, value head) as
solutions/delta_rule.py's `chunk_prepare_kernel`, the same inputs and outputs (w [T, HV, DK] and u [T, HV,
DV] in v's dtype; with the gates, g written for the other kernels), the same fp32 arithmetic (tensor-core
products in tf32 for 16-bit inputs), but A built in 16 x 16 blocks from 16-row tiles of k, each diagonal
block inverted by forward substitution (`unit_lower_inverse` at one block), the blocks below the diagonal
from T_ij = -T_ii sum_k A_ik T_kj, and w and u block row by block row. The scan and the output are the
course's (`chunk_scan`, `chunk_output` at chunks of 64). Qwen3.5-0.8B's DeltaNet shapes (16 heads, 128 x
128 state), bf16, inputs as the chapter's check makes them, T in TS, each timed by `benchmark.time_calls`
(a CUDA graph over four copies of the inputs) and traced kernel by kernel (torch.profiler): the course's rule
with its one-launch first kernel at chunks of 32 (the engine's when this ran) and 64, the engine's rule as it
is now (`chunk_size_for`), the blocked first kernel with value blocks of 16 and 32, and fla's
`chunk_gated_delta_rule`. Writes OUTDIR/delta_rule_prepare_probe_<gpu>_<date>.json,
saved after every length. `check` compares the blocked kernel's w, u and g with `chunk_prepare` at chunks
of 64 (with and without the gates, a last chunk cut short) and the whole rule with it against the
recurrent kernel.
Result: on an NVIDIA H100 80GB HBM3 (2026-12-06,
lab/results/delta_rule_prepare_probe_nvidia-h100-80gb-hbm3_2026-12-06.json, fla 0.6.0) the blocked first kernel
is the slowest form at every length: 233.5 us at 4,096 tokens against 130.8 us for the dense inverse at chunks
of 64 and 90.6 us at the engine's 32; the rule 370.2 us against the engine's 259.1 (fla 197.6). fla spends 40.8 us
on A and its inverse and 24.0 us on w and u, in two kernels whose products take 16-bit operands.
Verdict: not adopted: solutions/delta_rule.py keeps its dense `unit_lower_inverse`. Its chunks of 64 from 512
tokens came later, with kernel 1 split in two on 16-bit operands (lab/delta_rule_operands_probe.py).
"""
import os
import time

import torch
import triton
import triton.language as tl

from lab import common
from lab.delta_rule_kernels_probe import fla_fn, make_inputs, rule_with, time_by_length
from tritonllm_course import kernels
from tritonllm_course.triton_helpers import sigmoid, softplus

TS = (512, 1024, 2048, 4096)
SHAPE = {"H": 16, "HV": 16, "DK": 128, "DV": 128}
C = 64                # the chunk: four 16-row blocks
NUM_WARPS = 8

_dr = kernels.load("delta_rule", "solutions").module
unit_lower_inverse = _dr.unit_lower_inverse     # at one 16 x 16 block: forward substitution only


@triton.jit
def _gates(r, T, hv, HV: tl.constexpr, g_ptr, beta_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, sa, sb,
           GATES: tl.constexpr):
    """(g, beta) of the rows r (0 past T) for value head hv: loaded, or computed from a and b (chapter
    14_gates_l2norm's gates) with g stored for the scan and the output kernels."""
    mt = r < T
    if GATES:
        a = tl.load(a_ptr + r * sa + hv, mask=mt, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + r * sb + hv, mask=mt, other=0.0).to(tl.float32)
        decay_rate = -tl.exp(tl.load(A_log_ptr + hv).to(tl.float32))
        g = tl.where(mt, decay_rate * softplus(a + tl.load(dt_bias_ptr + hv).to(tl.float32)), 0.0)
        beta = tl.where(mt, sigmoid(b), 0.0)
        tl.store(g_ptr + r * HV + hv, g, mask=mt)
    else:
        g = tl.load(g_ptr + r * HV + hv, mask=mt, other=0.0)
        beta = tl.load(beta_ptr + r * HV + hv, mask=mt, other=0.0).to(tl.float32)
    return g, beta


@triton.jit
def _tile(ptr, r, T, stride, col0, cols, mcols):
    """Rows r (zeros past T) of a token-strided tensor, columns col0 + cols, in fp32: [16, len(cols)]."""
    return tl.load(ptr + r[:, None] * stride + col0 + cols[None, :], mask=(r < T)[:, None] & mcols[None, :],
                   other=0.0).to(tl.float32)


@triton.jit
def _below(ki, kj, beta_i, gam_i, gam_j, PREC: tl.constexpr):
    """A's block of rows i wholly after the columns j: beta_i (k_i . k_j) exp(gamma_i - gamma_j), [16, 16]."""
    return (tl.dot(ki, tl.trans(kj), input_precision=PREC) * beta_i[:, None]
            * tl.exp(gam_i[:, None] - gam_j[None, :]))


@triton.jit
def _diagonal_inverse(ki, beta_i, gam_i, PREC: tl.constexpr):
    """(I + A_ii)^-1 for a diagonal block: A_ii strictly lower, [16, 16]."""
    i, j = tl.arange(0, 16)[:, None], tl.arange(0, 16)[None, :]
    A = tl.where(i > j, tl.dot(ki, tl.trans(ki), input_precision=PREC) * beta_i[:, None]
                 * tl.exp(tl.minimum(gam_i[:, None] - gam_i[None, :], 0.0)), 0.0)
    return unit_lower_inverse(A, 16, 1, PREC)


@triton.jit
def _mm(a, b, PREC: tl.constexpr):
    return tl.dot(a, b, input_precision=PREC)


@triton.jit
def _store(ptr, r, T, HV: tl.constexpr, hv, D: tl.constexpr, cols, mcols, x):
    tl.store(ptr + (r[:, None] * HV + hv) * D + cols[None, :], x.to(ptr.dtype.element_ty),
             mask=(r < T)[:, None] & mcols[None, :])


@triton.jit(do_not_specialize=["T"])
def blocked_prepare_kernel(k_ptr, v_ptr, g_ptr, beta_ptr, w_ptr, u_ptr, T, sk, sv,
                           a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, sa, sb,
                           H: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
                           BK: tl.constexpr, BV: tl.constexpr, PREC: tl.constexpr, GATES: tl.constexpr):
    """Program (chunk n of 64 tokens, value head hv): w = T (beta exp(gamma) k), u = T (beta v) with
    T = (I + A)^-1, A strictly lower, A_ij = beta_i k_i.k_j exp(gamma_i - gamma_j), in 16-row blocks."""
    n, hv = tl.program_id(0), tl.program_id(1)
    h = hv // (HV // H)
    rk, rv = tl.arange(0, BK), tl.arange(0, BV)
    mk, mv = rk < DK, rv < DV
    r0 = n * 64 + tl.arange(0, 16)                               # the four blocks' tokens
    r1, r2, r3 = r0 + 16, r0 + 32, r0 + 48
    g0, b0 = _gates(r0, T, hv, HV, g_ptr, beta_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, sa, sb, GATES)
    g1, b1 = _gates(r1, T, hv, HV, g_ptr, beta_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, sa, sb, GATES)
    g2, b2 = _gates(r2, T, hv, HV, g_ptr, beta_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, sa, sb, GATES)
    g3, b3 = _gates(r3, T, hv, HV, g_ptr, beta_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, sa, sb, GATES)
    # gamma, the log-decay from the chunk's start, block by block: each block's cumsum after the blocks before
    # (padding: g = 0)
    s0 = tl.sum(g0, axis=0)
    s1 = s0 + tl.sum(g1, axis=0)
    s2 = s1 + tl.sum(g2, axis=0)
    c0 = tl.cumsum(g0, axis=0)
    c1 = tl.cumsum(g1, axis=0) + s0
    c2 = tl.cumsum(g2, axis=0) + s1
    c3 = tl.cumsum(g3, axis=0) + s2
    k0 = _tile(k_ptr, r0, T, sk, h * DK, rk, mk)                 # [16, BK] each
    k1 = _tile(k_ptr, r1, T, sk, h * DK, rk, mk)
    k2 = _tile(k_ptr, r2, T, sk, h * DK, rk, mk)
    k3 = _tile(k_ptr, r3, T, sk, h * DK, rk, mk)
    # the diagonal blocks' inverses, then the blocks below: T_ij = -T_ii sum_{j <= m < i} A_im T_mj
    T00 = _diagonal_inverse(k0, b0, c0, PREC)
    T11 = _diagonal_inverse(k1, b1, c1, PREC)
    T22 = _diagonal_inverse(k2, b2, c2, PREC)
    T33 = _diagonal_inverse(k3, b3, c3, PREC)
    A10 = _below(k1, k0, b1, c1, c0, PREC)
    A20 = _below(k2, k0, b2, c2, c0, PREC)
    A21 = _below(k2, k1, b2, c2, c1, PREC)
    A30 = _below(k3, k0, b3, c3, c0, PREC)
    A31 = _below(k3, k1, b3, c3, c1, PREC)
    A32 = _below(k3, k2, b3, c3, c2, PREC)
    T10 = -_mm(T11, _mm(A10, T00, PREC), PREC)
    T21 = -_mm(T22, _mm(A21, T11, PREC), PREC)
    T20 = -_mm(T22, _mm(A20, T00, PREC) + _mm(A21, T10, PREC), PREC)
    T32 = -_mm(T33, _mm(A32, T22, PREC), PREC)
    T31 = -_mm(T33, _mm(A31, T11, PREC) + _mm(A32, T21, PREC), PREC)
    T30 = -_mm(T33, _mm(A30, T00, PREC) + _mm(A31, T10, PREC) + _mm(A32, T20, PREC), PREC)
    # w, block row by block row, from the keys scaled by beta exp(gamma)
    x0 = k0 * (b0 * tl.exp(c0))[:, None]
    x1 = k1 * (b1 * tl.exp(c1))[:, None]
    x2 = k2 * (b2 * tl.exp(c2))[:, None]
    x3 = k3 * (b3 * tl.exp(c3))[:, None]
    _store(w_ptr, r0, T, HV, hv, DK, rk, mk, _mm(T00, x0, PREC))
    _store(w_ptr, r1, T, HV, hv, DK, rk, mk, _mm(T10, x0, PREC) + _mm(T11, x1, PREC))
    _store(w_ptr, r2, T, HV, hv, DK, rk, mk, _mm(T20, x0, PREC) + _mm(T21, x1, PREC) + _mm(T22, x2, PREC))
    _store(w_ptr, r3, T, HV, hv, DK, rk, mk,
           _mm(T30, x0, PREC) + _mm(T31, x1, PREC) + _mm(T32, x2, PREC) + _mm(T33, x3, PREC))
    # u from the values scaled by beta
    y0 = _tile(v_ptr, r0, T, sv, hv * DV, rv, mv) * b0[:, None]  # [16, BV] each
    y1 = _tile(v_ptr, r1, T, sv, hv * DV, rv, mv) * b1[:, None]
    y2 = _tile(v_ptr, r2, T, sv, hv * DV, rv, mv) * b2[:, None]
    y3 = _tile(v_ptr, r3, T, sv, hv * DV, rv, mv) * b3[:, None]
    _store(u_ptr, r0, T, HV, hv, DV, rv, mv, _mm(T00, y0, PREC))
    _store(u_ptr, r1, T, HV, hv, DV, rv, mv, _mm(T10, y0, PREC) + _mm(T11, y1, PREC))
    _store(u_ptr, r2, T, HV, hv, DV, rv, mv, _mm(T20, y0, PREC) + _mm(T21, y1, PREC) + _mm(T22, y2, PREC))
    _store(u_ptr, r3, T, HV, hv, DV, rv, mv,
           _mm(T30, y0, PREC) + _mm(T31, y1, PREC) + _mm(T32, y2, PREC) + _mm(T33, y3, PREC))


def blocked_prepare(k, v, g, beta, gates=None):
    """`chunk_prepare(k, v, g, beta, 64, gates)` with the blocked kernel: (w, u)."""
    T, H, DK = k.shape
    HV, DV = v.shape[1:]
    w = torch.empty(T, HV, DK, dtype=v.dtype, device=v.device)
    u = torch.empty(T, HV, DV, dtype=v.dtype, device=v.device)
    a, b, A_log, dt_bias = gates if gates is not None else (g, g, g, g)   # unused pointers: any tensor
    blocked_prepare_kernel[(triton.cdiv(T, C), HV)](
        k, v, g, beta, w, u, T, k.stride(0), v.stride(0), a, b, A_log, dt_bias, a.stride(0), b.stride(0),
        H=H, HV=HV, DK=DK, DV=DV, BK=_dr.prepare_block_k(DK), BV=_dr._pow2(DV),
        PREC=_dr._precision(v.dtype), GATES=gates is not None, num_warps=NUM_WARPS)
    return w, u


def blocked_rule(q, k, v, g, beta, initial_state=None, block_v=16):
    """The chunked rule at chunks of 64 with the blocked first kernel, the course's scan and output:
    (out, final_state), as `gated_delta_rule_chunked(..., chunk_size=64)`."""
    return rule_with(lambda k, v, g, beta, _: blocked_prepare(k, v, g, beta), C, q, k, v, g, beta,
                     initial_state, block_v)


def check(device="cpu", dtype=torch.float32) -> float:
    """The blocked kernel's w and u (and the g it writes from the gates) against `chunk_prepare` at chunks
    of 64, at lengths that cut a chunk and a block short, NaN-poisoned outputs; the whole rule with it
    against the recurrent kernel: the largest relative error."""
    worst = 0.0
    dims = {"H": 2, "HV": 4, "DK": 16, "DV": 32}
    for T in (5, 40, 70, 130):
        gen = torch.Generator(device=device).manual_seed(T)
        inp = make_inputs({"T": T, **dims}, dtype, device, gen)
        q, k, v, g, beta = (inp[n] for n in ("q", "k", "v", "g", "beta"))
        want_w, want_u = _dr.chunk_prepare(k, v, g, beta, C)
        got_w, got_u = blocked_prepare(k, v, g, beta)
        worst = max(worst, common.rel_err(got_w, want_w), common.rel_err(got_u, want_u))
        gates = (torch.randn(T, dims["HV"], generator=gen, device=device).to(dtype),
                 torch.randn(T, dims["HV"], generator=gen, device=device).to(dtype),
                 (0.5 * torch.randn(dims["HV"], generator=gen, device=device)).float(),
                 torch.randn(dims["HV"], generator=gen, device=device).float())
        g_want, g_got = (torch.full((T, dims["HV"]), float("nan"), device=device) for _ in range(2))
        want_w, want_u = _dr.chunk_prepare(k, v, g_want, g_want, C, gates)
        got_w, got_u = blocked_prepare(k, v, g_got, g_got, gates)
        worst = max(worst, common.rel_err(got_w, want_w), common.rel_err(got_u, want_u),
                    common.rel_err(g_got, g_want))
        want, want_state = _dr.gated_delta_rule_recurrent(**inp)
        for block_v in (16, 32):
            got, state = blocked_rule(**inp, block_v=block_v)
            worst = max(worst, common.rel_err(got, want), common.rel_err(state, want_state))
    return worst


def main(out):
    common.setup()
    fla, fla_version = fla_fn()
    budget, t0 = float(os.environ.get("PROBE_S", "200")), time.time()
    path = common.result_path(out, "delta_rule_prepare_probe")
    # on the GPU in bf16, the dtype it is timed in (fp32 at 16-column blocks is where Triton 3.6 faulted)
    res = common.header(check_rel_err=check("cuda", torch.bfloat16), fla=fla_version, shape=SHAPE, rows=[])
    variants = {
        # the course's one-launch kernel 1 (the engine's form at every length when this ran, 2026-12-06; its
        # record names the first "course, chunks of 32 (the engine)")
        "course, chunks of 32": lambda **s: rule_with(_dr.chunk_prepare, 32, **s),
        "course, chunks of 64": lambda **s: rule_with(_dr.chunk_prepare, 64, **s),
        "the engine (chunk_size_for)": lambda **s: _dr.gated_delta_rule_chunked(**s),
        "blocked first kernel, chunks of 64, block_v 16": lambda **s: blocked_rule(**s, block_v=16),
        "blocked first kernel, chunks of 64, block_v 32": lambda **s: blocked_rule(**s, block_v=32),
    }
    if fla is not None:
        variants["fla"] = fla
    return time_by_length(variants, TS, path, res, budget, t0)


if __name__ == "__main__":
    main(common.out_dir())
