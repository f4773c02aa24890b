"""The chunked delta rule's first kernel on 16-bit operands, and split in two as fla splits it: faster?

    python -m lab.delta_rule_operands_probe [OUTDIR]    (on a GPU; fla importable for its row; PROBE_S bounds
                                                        it, default 200; PROBE_TS="4096 512" picks the lengths)

Question: lab/delta_rule_prepare_probe.py measured fla's chunked rule 1.3x ahead of the course's at 4,096
tokens on an H100, most of the gap in the first kernel (the UT transform, w and u): the course's took 90.6 us
at chunks of 32 and 130.8 us at 64, fla's two kernels 40.8 + 24.0 us at 64. The course's kernel widens k and v
to fp32 and runs every product in tf32; fla feeds its tensor cores 16-bit operands with fp32 accumulation (half
the registers a tile, twice the rate), and does A and its inverse in one kernel, w and u in another. Which of
the two makes the difference, and does either put the course's rule ahead of fla's from 512 tokens on?
Method: the course's arithmetic (`chunk_ut_transform`: gamma, A = strictly_lower(beta_i k_i.k_j
exp(gamma_i - gamma_j)), Tm = `unit_lower_inverse(A)` in fp32; `wy_product`: w = Tm (beta exp(gamma) k),
u = Tm (beta v)) with the products' operands in the inputs' 16-bit dtype, in two forms: `prepare16_kernel`
below, one program per (chunk, value head) as the course's, and the split form (Tm alone stored, in v's dtype,
[T, HV, C], then w or u, one program per chunk, value head and output), which ran as this probe's own two
kernels and, adopted, is now solutions/delta_rule.py's `chunk_prepare_split`. Qwen3.5-0.8B's DeltaNet shapes
(16 heads, 128 x 128 state), bf16, inputs as the chapter's check makes them, T in TS: the engine's rule
(`chunk_size_for`; chunks of 32 when this ran, named "course, chunks of 32 (the engine)" in the record), the
course's one-launch kernel 1 and each form at chunks of 32 and 64 with the course's scan and output after it,
and fla's `chunk_gated_delta_rule`, each timed by `benchmark.time_calls` (a CUDA graph over four copies of the
inputs) and traced kernel by kernel (torch.profiler). Writes OUTDIR/delta_rule_operands_probe_<gpu>_<date>.json,
saved after every length. `check` compares each form's w and u with `chunk_prepare` and the whole rule with
each against the recurrent kernel (relative errors: in fp32 under the interpreter the casts are exact, on the
GPU in bf16 they are what the 16-bit operands cost).
Result: on an NVIDIA H100 80GB HBM3 (2026-12-06, fla 0.6.0): split in two at chunks of 64 is the fastest of the
course's forms from 1,024 tokens on and faster than the engine's chunks of 32 at every length: 33.5 us at 512
tokens (one 16-bit launch at 64 32.6, the engine 36.0, fla 50.8) and 191.7 us at 4,096 (the engine 259.3, fla
177.7); its kernels 30.0 + 24.8 us where one 16-bit launch took 87.7 and the fp32 one 132.4
(lab/results/delta_rule_operands_probe_nvidia-h100-80gb-hbm3_2026-12-06.json).
Verdict: adopted: chunks of 64 from 512 tokens, kernel 1 split in two (solutions/delta_rule.py,
`chunk_prepare_split`); fla keeps a lead at 4,096 tokens, in its scan and output kernels.
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


@triton.jit(do_not_specialize=["T"])
def prepare16_kernel(k_ptr, v_ptr, g_ptr, beta_ptr, w_ptr, u_ptr, T, sk, sv,
                     H: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, BK: tl.constexpr,
                     BV: tl.constexpr, C: tl.constexpr, NC: tl.constexpr, PREC: tl.constexpr):
    """Program (chunk n, value head hv): w and u as `chunk_prepare_kernel`, the products on 16-bit operands
    (the course's helpers on k and v as stored; the UT transform rounded to v's dtype, as fla rounds it)."""
    n, hv = tl.program_id(0), tl.program_id(1)
    h = hv // (HV // H)
    rc = n * C + tl.arange(0, C)
    rk, rv = tl.arange(0, BK), tl.arange(0, BV)
    mt, mk, mv = rc < T, rk < DK, rv < DV
    g = tl.load(g_ptr + rc * HV + hv, mask=mt, other=0.0)
    beta = tl.load(beta_ptr + rc * HV + hv, mask=mt, other=0.0).to(tl.float32)
    k16 = tl.load(k_ptr + rc[:, None] * sk + h * DK + rk[None, :], mask=mt[:, None] & mk[None, :], other=0.0)
    v = tl.load(v_ptr + rc[:, None] * sv + hv * DV + rv[None, :], mask=mt[:, None] & mv[None, :], other=0.0)
    gamma, Tm = _dr.chunk_ut_transform(k16, g, beta, C, NC, PREC)
    Tm = Tm.to(v.dtype)                                          # [C, C]
    w = _dr.wy_product(Tm, k16, gamma, beta, True, PREC)
    u = _dr.wy_product(Tm, v, gamma, beta, False, PREC)
    tl.store(w_ptr + (rc[:, None] * HV + hv) * DK + rk[None, :], w.to(w_ptr.dtype.element_ty),
             mask=mt[:, None] & mk[None, :])
    tl.store(u_ptr + (rc[:, None] * HV + hv) * DV + rv[None, :], u.to(u_ptr.dtype.element_ty),
             mask=mt[:, None] & mv[None, :])


def prepare16(k, v, g, beta, C):
    """(w, u) as `chunk_prepare(k, v, g, beta, C)`, by `prepare16_kernel`."""
    T, H, DK = k.shape
    HV, DV = v.shape[1:]
    w = torch.empty(T, HV, DK, dtype=v.dtype, device=v.device)
    u = torch.empty(T, HV, DV, dtype=v.dtype, device=v.device)
    prepare16_kernel[(triton.cdiv(T, C), HV)](k, v, g, beta, w, u, T, k.stride(0), v.stride(0), H=H, HV=HV, DK=DK,
                                              DV=DV, BK=_dr.prepare_block_k(DK), BV=_dr._pow2(DV), C=C,
                                              NC=C // 16, PREC=_dr._precision(v.dtype), num_warps=8)
    return w, u


# "split in two" was this probe's own pair of kernels when it ran (2026-12-06); adopted, it is now the course's
PREPARES = {"16-bit operands": prepare16, "split in two": _dr.chunk_prepare_split}


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
    variants = {"the engine (chunk_size_for)": lambda **s: _dr.gated_delta_rule_chunked(**s)}
    for C in CHUNKS:     # the course's one-launch kernel 1, fp32 operands (the engine's form below 512 tokens)
        variants[f"course, chunks of {C}"] = lambda C=C, **s: rule_with(_dr.chunk_prepare, C, **s)
    for C in CHUNKS:
        for name, prepare in PREPARES.items():
            variants[f"{name}, chunks of {C}"] = lambda prepare=prepare, C=C, **s: rule_with(prepare, C, **s)
    if fla is not None:
        variants["fla"] = fla
    return time_by_length(variants, TS, path, res, budget, t0)


if __name__ == "__main__":
    main(common.out_dir())
