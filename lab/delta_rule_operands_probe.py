"""The chunked delta rule's first kernel on 16-bit operands, and split in two as fla splits it: faster?

    python -m lab.delta_rule_operands_probe [OUTDIR]    (on a GPU; fla importable for its row; PROBE_S bounds
                                                        it, default 200; PROBE_TS="4096 512" picks the lengths)

Question: lab/delta_rule_prepare_probe.py measured fla's chunked rule 1.3x ahead of the course's at 4,096
tokens on an H100, most of the gap in the first kernel (the UT transform, w and u): the course's took 90.6 us
at chunks of 32 and 130.8 us at 64, fla's two kernels 40.8 + 24.0 us at 64. The course's kernel widens k and v
to fp32 and runs every product in tf32; fla feeds its tensor cores 16-bit operands with fp32 accumulation (half
the registers a tile, twice the rate), and does A and its inverse in one kernel, w and u in another. Which of
the two makes the difference, and does either put the course's rule ahead of fla's from 512 tokens on?
Method: two kernels below, in the arithmetic of solutions/delta_rule.py's `chunk_prepare_kernel` (gamma,
A = strictly_lower(beta_i k_i.k_j exp(gamma_i - gamma_j)), Tm = `unit_lower_inverse(A)` in fp32, w = Tm
(beta exp(gamma) k), u = Tm (beta v)) but with the products' operands in the inputs' 16-bit dtype:
`prepare16_kernel`, one program per (chunk, value head) as the course's, and the split form,
`inverse_kernel` (A and Tm, stored in v's dtype, [T, HV, C]) then `wu_kernel` (w or u, one program per chunk,
value head and output). Qwen3.5-0.8B's DeltaNet shapes (16 heads, 128 x 128 state), bf16, inputs as the
chapter's check makes them, T in TS: the engine's rule (chunks of 32), each form at chunks of 32 and 64 with the
course's scan and output after it, and fla's `chunk_gated_delta_rule`, each timed by `benchmark.time_calls` (a
CUDA graph over four copies of the inputs) and traced kernel by kernel (torch.profiler). Writes
OUTDIR/delta_rule_operands_probe_<gpu>_<date>.json, saved after every length. `check` compares each form's w
and u with `chunk_prepare` and the whole rule with each against the recurrent kernel (relative errors: in
fp32 under the interpreter the casts are exact, on the GPU in bf16 they are what the 16-bit operands cost).
Result: not measured yet: python -m lab.delta_rule_operands_probe on an H100 or H200 (about 3 minutes).
Verdict: to be decided; not adopted until measured: solutions/delta_rule.py keeps its fp32 operands.
"""
import os
import time

import torch
import triton
import triton.language as tl

from lab import common
from lab.delta_rule_kernels_probe import fla_fn, make_inputs, rule_with, time_by_length
from tritonllm_course import kernels

TS = tuple(int(t) for t in os.environ.get("PROBE_TS", "512 1024 2048 4096").split())   # the lengths, in this order
SHAPE = {"H": 16, "HV": 16, "DK": 128, "DV": 128}
CHUNKS = (32, 64)

_dr = kernels.load("delta_rule", "solutions").module
unit_lower_inverse = _dr.unit_lower_inverse


@triton.jit
def _chunk_gates(g_ptr, beta_ptr, rc, mt, hv, HV: tl.constexpr):
    """gamma (the log-decay from the chunk's start) and beta of the chunk's tokens rc (0 past T), fp32."""
    g = tl.load(g_ptr + rc * HV + hv, mask=mt, other=0.0)
    beta = tl.load(beta_ptr + rc * HV + hv, mask=mt, other=0.0).to(tl.float32)
    return tl.cumsum(g, axis=0), beta


@triton.jit
def _inverse16(k16, gamma, beta, C: tl.constexpr, NC: tl.constexpr, PREC: tl.constexpr):
    """(I + A)^-1 in fp32 for the chunk, A's product k k^T on the 16-bit keys k16 [C, BK]."""
    i, j = tl.arange(0, C)[:, None], tl.arange(0, C)[None, :]
    decay = tl.exp(tl.minimum(gamma[:, None] - gamma[None, :], 0.0))
    A = tl.where(i > j, tl.dot(k16, tl.trans(k16)) * beta[:, None] * decay, 0.0)
    return unit_lower_inverse(A, C, NC, PREC)


@triton.jit
def _apply_store(Tm, x, scale, out_ptr, rc, mt, hv, HV: tl.constexpr, D: tl.constexpr, cols, mcols):
    """out[rc, hv, cols] = Tm (scale * x), the scaled tile rounded to Tm's dtype for the product: w from the
    keys (scale beta exp(gamma)), u from the values (scale beta)."""
    xs = (x.to(tl.float32) * scale[:, None]).to(Tm.dtype)
    tl.store(out_ptr + (rc[:, None] * HV + hv) * D + cols[None, :], tl.dot(Tm, xs).to(out_ptr.dtype.element_ty),
             mask=mt[:, None] & mcols[None, :])


@triton.jit(do_not_specialize=["T"])
def prepare16_kernel(k_ptr, v_ptr, g_ptr, beta_ptr, w_ptr, u_ptr, T, sk, sv,
                     H: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, BK: tl.constexpr,
                     BV: tl.constexpr, C: tl.constexpr, NC: tl.constexpr, PREC: tl.constexpr):
    """Program (chunk n, value head hv): w and u as `chunk_prepare_kernel`, the products on 16-bit operands."""
    n, hv = tl.program_id(0), tl.program_id(1)
    h = hv // (HV // H)
    rc = n * C + tl.arange(0, C)
    rk, rv = tl.arange(0, BK), tl.arange(0, BV)
    mt, mk, mv = rc < T, rk < DK, rv < DV
    gamma, beta = _chunk_gates(g_ptr, beta_ptr, rc, mt, hv, HV)
    k16 = tl.load(k_ptr + rc[:, None] * sk + h * DK + rk[None, :], mask=mt[:, None] & mk[None, :], other=0.0)
    v = tl.load(v_ptr + rc[:, None] * sv + hv * DV + rv[None, :], mask=mt[:, None] & mv[None, :], other=0.0)
    Tm = _inverse16(k16, gamma, beta, C, NC, PREC).to(v.dtype)   # [C, C], rounded as fla rounds its inverse
    _apply_store(Tm, k16, beta * tl.exp(gamma), w_ptr, rc, mt, hv, HV, DK, rk, mk)
    _apply_store(Tm, v, beta, u_ptr, rc, mt, hv, HV, DV, rv, mv)


@triton.jit(do_not_specialize=["T"])
def inverse_kernel(k_ptr, g_ptr, beta_ptr, ai_ptr, T, sk, H: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr,
                   BK: tl.constexpr, C: tl.constexpr, NC: tl.constexpr, PREC: tl.constexpr):
    """Program (chunk n, value head hv): Tm = (I + A)^-1 into ai [T, HV, C] (row i of the chunk's Tm at token i)."""
    n, hv = tl.program_id(0), tl.program_id(1)
    h = hv // (HV // H)
    rc = n * C + tl.arange(0, C)
    rk = tl.arange(0, BK)
    mt = rc < T
    gamma, beta = _chunk_gates(g_ptr, beta_ptr, rc, mt, hv, HV)
    k16 = tl.load(k_ptr + rc[:, None] * sk + h * DK + rk[None, :], mask=mt[:, None] & (rk < DK)[None, :],
                  other=0.0)
    Tm = _inverse16(k16, gamma, beta, C, NC, PREC)
    rj = tl.arange(0, C)
    tl.store(ai_ptr + (rc[:, None] * HV + hv) * C + rj[None, :], Tm.to(ai_ptr.dtype.element_ty), mask=mt[:, None])


@triton.jit(do_not_specialize=["T"])
def wu_kernel(k_ptr, v_ptr, g_ptr, beta_ptr, ai_ptr, w_ptr, u_ptr, T, sk, sv, H: tl.constexpr, HV: tl.constexpr,
              DK: tl.constexpr, DV: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, C: tl.constexpr):
    """Program (chunk n, value head hv, which): which = 0 writes w = Tm (beta exp(gamma) k), which = 1 writes
    u = Tm (beta v)."""
    n, hv, which = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    h = hv // (HV // H)
    rc = n * C + tl.arange(0, C)
    mt = rc < T
    gamma, beta = _chunk_gates(g_ptr, beta_ptr, rc, mt, hv, HV)
    rj = tl.arange(0, C)
    Tm = tl.load(ai_ptr + (rc[:, None] * HV + hv) * C + rj[None, :], mask=mt[:, None], other=0.0)   # [C, C]
    if which == 0:
        rk = tl.arange(0, BK)
        mk = rk < DK
        k = tl.load(k_ptr + rc[:, None] * sk + h * DK + rk[None, :], mask=mt[:, None] & mk[None, :], other=0.0)
        _apply_store(Tm, k, beta * tl.exp(gamma), w_ptr, rc, mt, hv, HV, DK, rk, mk)
    else:
        rv = tl.arange(0, BV)
        mv = rv < DV
        v = tl.load(v_ptr + rc[:, None] * sv + hv * DV + rv[None, :], mask=mt[:, None] & mv[None, :], other=0.0)
        _apply_store(Tm, v, beta, u_ptr, rc, mt, hv, HV, DV, rv, mv)


def _dims(k, v, C):
    T, H, DK = k.shape
    HV, DV = v.shape[1:]
    # key tiles of 32 columns at least, as `chunk_prepare` takes them (Triton 3.6's fault at 16 columns)
    return T, (triton.cdiv(T, C), HV), dict(H=H, HV=HV, DK=DK, BK=max(32, _dr._pow2(DK)), C=C), DV


def prepare16(k, v, g, beta, C):
    """(w, u) as `chunk_prepare(k, v, g, beta, C)`, by `prepare16_kernel`."""
    T, grid, kw, DV = _dims(k, v, C)
    w = torch.empty(T, kw["HV"], kw["DK"], dtype=v.dtype, device=v.device)
    u = torch.empty(T, kw["HV"], DV, dtype=v.dtype, device=v.device)
    prepare16_kernel[grid](k, v, g, beta, w, u, T, k.stride(0), v.stride(0), **kw, DV=DV, BV=_dr._pow2(DV),
                           NC=C // 16, PREC=_dr._precision(v.dtype), num_warps=8)
    return w, u


def split_prepare(k, v, g, beta, C):
    """(w, u) as `chunk_prepare(k, v, g, beta, C)`, by `inverse_kernel` then `wu_kernel`."""
    T, grid, kw, DV = _dims(k, v, C)
    ai = torch.empty(T, kw["HV"], C, dtype=v.dtype, device=v.device)
    inverse_kernel[grid](k, g, beta, ai, T, k.stride(0), **kw, NC=C // 16, PREC=_dr._precision(v.dtype),
                         num_warps=4)
    w = torch.empty(T, kw["HV"], kw["DK"], dtype=v.dtype, device=v.device)
    u = torch.empty(T, kw["HV"], DV, dtype=v.dtype, device=v.device)
    wu_kernel[(*grid, 2)](k, v, g, beta, ai, w, u, T, k.stride(0), v.stride(0), **kw, DV=DV, BV=_dr._pow2(DV),
                          num_warps=4)
    return w, u


PREPARES = {"16-bit operands": prepare16, "split in two": split_prepare}


def check(device="cpu", dtype=torch.float32) -> float:
    """Each form's w and u against `chunk_prepare` at chunks of 32 and 64, at lengths that cut a chunk short,
    and the whole rule with each against the recurrent kernel: the largest relative error."""
    worst = 0.0
    dims = {"H": 2, "HV": 4, "DK": 16, "DV": 32}
    for T in (5, 40, 70):
        gen = torch.Generator(device=device).manual_seed(T)
        inp = make_inputs({"T": T, **dims}, dtype, device, gen)
        q, k, v, g, beta = (inp[n] for n in ("q", "k", "v", "g", "beta"))
        want, want_state = _dr.gated_delta_rule_recurrent(**inp)
        for C in CHUNKS:
            want_w, want_u = _dr.chunk_prepare(k, v, g, beta, C)
            for prepare in PREPARES.values():
                got_w, got_u = prepare(k, v, g, beta, C)
                got, state = rule_with(prepare, C, **inp)
                worst = max(worst, common.rel_err(got_w, want_w), common.rel_err(got_u, want_u),
                            common.rel_err(got, want), common.rel_err(state, want_state))
    return worst


def main(out):
    common.setup()
    fla, fla_version = fla_fn()
    budget, t0 = float(os.environ.get("PROBE_S", "200")), time.time()
    path = common.result_path(out, "delta_rule_operands_probe")
    res = common.header(check_rel_err=check("cuda", torch.bfloat16), fla=fla_version, shape=SHAPE, rows=[])
    variants = {"course, chunks of 32 (the engine)": lambda **s: _dr.gated_delta_rule_chunked(**s)}
    variants["course, chunks of 64"] = lambda **s: _dr.gated_delta_rule_chunked(**s, chunk_size=64)
    for C in CHUNKS:
        for name, prepare in PREPARES.items():
            variants[f"{name}, chunks of {C}"] = lambda prepare=prepare, C=C, **s: rule_with(prepare, C, **s)
    if fla is not None:
        variants["fla"] = fla
    return time_by_length(variants, TS, path, res, budget, t0)


if __name__ == "__main__":
    main(common.out_dir())
