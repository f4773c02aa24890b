"""The chunked delta rule in one kernel or two rather than three: at a short prompt, and at a long one?

    python -m lab.delta_rule_fused_probe [OUTDIR]    (on a GPU; PROBE_S bounds it, default 300)
    (run on its own: scripts/gpu_extras.sh prompt does not run it)

Question: chapter 16_delta_rule_chunked's rule runs three kernels a layer: the UT transform per chunk, the
scan over chunks per value head and block of value columns, the output per chunk. At a 128-token prompt the
three take 23 us a DeltaNet layer (the fast level's prompt profile of 2026-12-02, results/profile_nvidia-
h200_2026-12-02.json: 419 us over 18 layers, the largest slot of that prompt), for a few microseconds of
arithmetic and a 1 MiB state each way: their time is three launches and the round trips between them (w, u,
v_new and the chunk-start states written by one kernel and read by the next). For a short prompt the scan's
programs can do the whole rule themselves, chunk after chunk: each recomputes its chunk's UT transform and
w (the same for every value block of a head: redundant, but small at 16-token chunks), keeps its state
slice in registers, and writes only o and the final state. Which is faster, and up to which prompt length?
And at long prompts, where the UT transform is better done in parallel: the first kernel as it is, then the
scan computing each chunk's output as it goes (two launches; the chunk-start states, 67 MB at 4,096 tokens
in chunks of 32, and v_new never written)?
Method: `fused_chunked_kernel` below, one program per (value head, block of BV value columns), the gates
(chapter 14_gates_l2norm) computed inside as the fast level's first kernel does and, with the gated RMSNorm
(chapter 17_deltanet_layer) in the epilogue, whole heads a program (BV = DV); every product in fp32 (tf32 on
the tensor cores for bf16 inputs) where the three kernels round w, u, v_new and the chunk-start states to
bf16. (1) The rule alone at Qwen3.5-0.8B's shapes (16 heads, 128 x 128 state, bf16), T = 16 to 4,096 (TS),
timed by `benchmark.time_calls` (a CUDA graph over four copies of the state; q, k, v and the gates shared):
the engine's kernels as it launches them (three when this ran; four from 512 tokens now, kernel 1 split in two)
(`gated_delta_rule_chunked_gates` with the gated norm) against the fused kernel at chunks of 16, 32, 64 and,
without the norm, value blocks of 16-64, and against the two-launch form (`prepared=True`) at the same
chunks and blocks; the relative error of each form without the norm against the fp64 rule. (2) The
fast level's time to the first token of a 128-token prompt (its chunk graphs, the median of five as
`engine_bench` times it) with the fused kernel swapped in for prompts of at most 128 tokens, against the
engine as it is, each twice in alternation; the first tokens compared. Writes
OUTDIR/delta_rule_fused_probe_<gpu>_<date>.json. `check` compares the fused kernel with the three kernels
and the recurrent one under the interpreter at odd lengths, with and without the gates and the norm.
Result: on an NVIDIA H100 80GB HBM3 (2026-12-06,
lab/results/delta_rule_fused_probe_nvidia-h100-80gb-hbm3_2026-12-06.json) the one launch wins only at 16 tokens
without the norm (7.4 against 11.2 us); with the norm it is 6% behind there (12.8 against 12.1 us) and further from
64 tokens on: at 128 tokens 66.4 us (chunks of 16) and the two launches 36.7 us against the three kernels' 17.5.
In the engine the first token of a 128-token prompt took 2.61 ms against 1.84 ms, the same token. (Its first run
had stopped in `check`: 16-column key tiles at DK = 16, which Triton 3.6 miscompiles in fp32 at chunks of 64; it
takes 32 columns at least now, as chapter 16_delta_rule_chunked's first kernel does.)
Verdict: not adopted: solutions/delta_rule.py keeps its separate kernels (three; four from 512 tokens, where
chunks of 64 split the first in two).
"""
import os
import time

import torch
import triton
import triton.language as tl

from lab import common
from tritonllm_course import kernels, validate
from tritonllm_course.triton_helpers import sigmoid, silu, softplus

# chapter 16_delta_rule_chunked's UT transform
unit_lower_inverse = kernels.load("delta_rule", "solutions").module.unit_lower_inverse

TS = (16, 64, 128, 256, 512, 1024, 4096)
CHUNKS = (16, 32, 64)
BLOCKS = (16, 32, 64)
SHAPE = {"H": 16, "HV": 16, "DK": 128, "DV": 128}
FUSED_MAX_T = 128          # the engine swap: prompts of at most this many tokens take the fused kernel
SUB = 16


@triton.jit(do_not_specialize=["T"])
def fused_chunked_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, s0_ptr, o_ptr, st_ptr, T, sq, sk, sv,
                         a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, sa, sb, z_ptr, nw_ptr, sz, eps, w_ptr, u_ptr,
                         H: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
                         BK: tl.constexpr, BV: tl.constexpr, C: tl.constexpr, NC: tl.constexpr,
                         PREC: tl.constexpr, HAS_S0: tl.constexpr, GATES: tl.constexpr,
                         GATED_NORM: tl.constexpr, PREPARED: tl.constexpr = False):
    """Program (value head hv, value block): the gated delta rule over all T tokens, C at a time, its
    [BK, BV] state slice in registers (fp32). Per chunk: gamma = cumsum(g), A = strictly_lower(beta_i
    k_i.k_j exp(gamma_i - gamma_j)), Tm = (I + A)^-1, w = Tm (beta exp(gamma) k), u = Tm (beta v),
    v_new = u - w S, o = exp(gamma) q S + (lower_incl(q k^T) Gamma) v_new, S = exp(gamma_C) S +
    k^T (exp(gamma_C - gamma) v_new). GATES: beta and g from a, b, A_log, dt_bias; GATED_NORM (BV >= DV):
    o -> rmsnorm(o) * w_norm * silu(z) per head, of o as it would be stored. PREPARED: w and u (and g) as
    chapter 16_delta_rule_chunked's first kernel wrote them ([T, HV, DK] and [T, HV, DV] in v's dtype), not
    recomputed: the scan and the output in one kernel after it."""
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
    i, j = tl.arange(0, C)[:, None], tl.arange(0, C)[None, :]
    for n in range(tl.cdiv(T, C)):
        rc = n * C + tl.arange(0, C)
        mt = rc < T
        if GATES:
            a = tl.load(a_ptr + rc * sa + hv, mask=mt, other=0.0).to(tl.float32)
            b = tl.load(b_ptr + rc * sb + hv, mask=mt, other=0.0).to(tl.float32)
            decay_rate = -tl.exp(tl.load(A_log_ptr + hv).to(tl.float32))
            g = tl.where(mt, decay_rate * softplus(a + tl.load(dt_bias_ptr + hv).to(tl.float32)), 0.0)
            beta = tl.where(mt, sigmoid(b), 0.0)
        else:
            g = tl.load(g_ptr + rc * HV + hv, mask=mt, other=0.0)   # padding: g = 0, beta = 0, k = 0
            beta = tl.load(beta_ptr + rc * HV + hv, mask=mt, other=0.0).to(tl.float32)
        kq = mt[:, None] & mk[None, :]
        k = tl.load(k_ptr + rc[:, None] * sk + h * DK + rk[None, :], mask=kq, other=0.0).to(tl.float32)
        q = tl.load(q_ptr + rc[:, None] * sq + h * DK + rk[None, :], mask=kq, other=0.0).to(tl.float32)
        if not PREPARED:
            v = tl.load(v_ptr + rc[:, None] * sv + hv * DV + rv[None, :], mask=mt[:, None] & mv[None, :],
                        other=0.0).to(tl.float32)                # [C, BV]
        gamma = tl.cumsum(g, axis=0)
        gamma_last = tl.sum(g, axis=0)
        decay = tl.exp(tl.minimum(gamma[:, None] - gamma[None, :], 0.0))           # [C, C]
        if PREPARED:
            w = tl.load(w_ptr + (rc[:, None] * HV + hv) * DK + rk[None, :], mask=kq, other=0.0).to(tl.float32)
            u = tl.load(u_ptr + (rc[:, None] * HV + hv) * DV + rv[None, :], mask=mt[:, None] & mv[None, :],
                        other=0.0).to(tl.float32)
        else:
            A = tl.where(i > j, tl.dot(k, tl.trans(k), input_precision=PREC) * beta[:, None] * decay, 0.0)
            Tm = unit_lower_inverse(A, C, NC, PREC)
            w = tl.dot(Tm, k * (beta * tl.exp(gamma))[:, None], input_precision=PREC)   # [C, BK]
            u = tl.dot(Tm, v * beta[:, None], input_precision=PREC)                     # [C, BV]
        v_new = u - tl.dot(w, S, input_precision=PREC)
        P = tl.where(i >= j, tl.dot(q, tl.trans(k), input_precision=PREC) * decay, 0.0)
        o = tl.dot(q, S, input_precision=PREC) * tl.exp(gamma)[:, None] + tl.dot(P, v_new, input_precision=PREC)
        if GATED_NORM:
            o = o.to(o_ptr.dtype.element_ty).to(tl.float32)
            z = tl.load(z_ptr + rc[:, None] * sz + hv * DV + rv[None, :], mask=mt[:, None] & mv[None, :],
                        other=0.0).to(tl.float32)
            inv_rms = tl.rsqrt(tl.sum(o * o, axis=1) / DV + eps)
            o = o * inv_rms[:, None] * tl.load(nw_ptr + rv, mask=mv, other=0.0).to(tl.float32)[None, :] * silu(z)
        tl.store(o_ptr + (rc[:, None] * HV + hv) * DV + rv[None, :], o.to(o_ptr.dtype.element_ty),
                 mask=mt[:, None] & mv[None, :])
        S = S * tl.exp(gamma_last) + tl.dot(tl.trans(k), v_new * tl.exp(gamma_last - gamma)[:, None],
                                            input_precision=PREC)
    tl.store(st_ptr + hv * DK * DV + tile, S, mask=smask)


def _pow2(n):
    return max(SUB, triton.next_power_of_2(n))


def fused_chunked(q, k, v, g=None, beta=None, initial_state=None, out=None, final_state=None, chunk_size=16,
                  block_v=16, gates=None, norm=None, prepared=False):
    """The rule in one launch on validated inputs (the chunked rule's arguments): gates = (a, b, A_log,
    dt_bias) or None (then g and beta); norm = (z, norm_weight, eps) or None. prepared: in two launches,
    chapter 16_delta_rule_chunked's first kernel (`chunk_prepare`) and then the scan with the output. Returns (out,
    final_state)."""
    T, H, DK = k.shape
    HV, DV = v.shape[1:]
    w = u = v                                                    # unused pointers unless prepared
    if prepared:
        dr = kernels.load("delta_rule", "solutions").module
        if gates is not None:       # the first kernel computes the gates and leaves g in this workspace
            g = torch.empty(T, HV, dtype=torch.float32, device=v.device)
        w, u = dr.chunk_prepare(k, v, g, g if beta is None else beta, chunk_size, gates)
        gates, beta = None, g      # consumed there: the kernel reads g; beta, folded into w and u, is unused

    out = torch.empty(T, HV, DV, dtype=v.dtype, device=v.device) if out is None else out
    final_state = (torch.empty(HV, DK, DV, dtype=torch.float32, device=v.device) if final_state is None
                   else final_state)
    BV = _pow2(DV) if norm is not None else min(block_v, _pow2(DV))
    # key tiles of 32 columns at least, as chapter 16_delta_rule_chunked's first kernel takes them: with 16-column
    # ones, fp32 and chunks of 64, Triton 3.6 builds a UT-transform product that reads past its shared memory
    # (this probe's check hit it on an H100, 2026-12-06: an illegal memory access at DK = 16)
    a, b, A_log, dt_bias = gates if gates is not None else (g, g, g, g)      # unused pointers: any tensor
    z, nw, eps = norm if norm is not None else (out, out, 1.0)
    g, beta = (a, a) if gates is not None else (g, beta)
    fused_chunked_kernel[(HV, triton.cdiv(DV, BV))](
        q, k, v, g, beta, initial_state, out, final_state, T, q.stride(0), k.stride(0), v.stride(0),
        a, b, A_log, dt_bias, a.stride(0), b.stride(0), z, nw, z.stride(0), eps, w, u, H=H, HV=HV, DK=DK, DV=DV,
        BK=max(32, _pow2(DK)), BV=BV, C=chunk_size, NC=chunk_size // SUB,
        PREC="tf32x3" if v.dtype == torch.float32 else "tf32",
        HAS_S0=initial_state is not None, GATES=gates is not None, GATED_NORM=norm is not None, PREPARED=prepared,
        num_warps=8 if norm is not None else 4)
    return out, final_state


def swapped_gates_rule(original, max_t=FUSED_MAX_T):
    """`gated_delta_rule_chunked_gates` (the engine's prompt slot at the fast level), the fused kernel for
    prompts of at most max_t tokens, the original beyond."""
    def rule(q, k, v, a, b, A_log, dt_bias, initial_state=None, out=None, final_state=None, g=None, z=None,
             norm_weight=None, eps=1e-6, chunk_size=None, block_v=16):
        if q.shape[0] > max_t:
            return original(q, k, v, a, b, A_log, dt_bias, initial_state, out, final_state, g, z, norm_weight,
                            eps, chunk_size, block_v)
        T, H, HV, DK, DV, device, out, final_state = validate.delta_rule_gate_inputs(
            q, k, v, a, b, A_log, dt_bias, initial_state, out, final_state,
            kernels.load("delta_rule", "solutions").module.MAX_HEAD_DIM)
        norm = None if z is None else (z, norm_weight, eps)
        if q.dtype != v.dtype:
            q, k = q.to(v.dtype), k.to(v.dtype)
        return fused_chunked(q, k, v, initial_state=initial_state, out=out, final_state=final_state,
                             chunk_size=chunk_size or 16, block_v=block_v, gates=(a, b, A_log, dt_bias), norm=norm)
    return rule


def _inputs(T, dims, dtype, device, seed):
    """The gates' inputs beside q, k, v and a state: (q, k, v, a, b, A_log, dt_bias, state, z, norm_weight)."""
    from tritonllm_course import slots
    gen = torch.Generator(device=device).manual_seed(seed)
    base = slots.get("gated_delta_chunked").make_inputs({"T": T, **dims}, dtype, device, gen)
    HV, DV = dims["HV"], dims["DV"]

    def randn(*size):
        return torch.randn(*size, generator=gen, device=device)
    return (base["q"], base["k"], base["v"], randn(T, HV).to(dtype), randn(T, HV).to(dtype),
            (0.5 * randn(HV)).float(), randn(HV).float(), base["initial_state"], randn(T, HV, DV).to(dtype),
            (1.0 + 0.1 * randn(DV)).to(dtype))


def engine_logits(swap: bool, device: str) -> tuple[torch.Tensor, int]:
    """The tiny config's fast engine after a 9-token prompt, as it is or with the fused kernel in its prompt
    slot (`swapped_gates_rule`): (the prompt's last logits, how many times the fused kernel ran)."""
    from tritonllm_course.config import TINY
    from tritonllm_course.engine import Engine
    dr = kernels.load("delta_rule", "solutions").module
    original, ran = dr.gated_delta_rule_chunked_gates, []
    fused = swapped_gates_rule(original)

    def counted(*args, **kwargs):
        ran.append(1)
        return fused(*args, **kwargs)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    with common.replaced(dr, "gated_delta_rule_chunked_gates", counted if swap else original):
        engine = Engine.random(TINY, dtype=dtype, device=device, seed=0, max_seq_len=40, level="fast")
        logits = engine.prefill([3, 1, 4, 1, 5, 9, 2, 6, 5]).float().clone()
    return logits, len(ran)


def check(device="cpu") -> float:
    """The fused kernel against the three kernels (gates, with and without the gated norm; plain g and beta
    against the recurrent kernel), fp32, odd lengths (a last chunk cut short), every chunk size and a
    value block smaller than DV; and the tiny fast engine's prompt logits with the fused kernel in its
    prompt slot (where it must run) against the engine as it is: the largest relative error."""
    (fused, ran), (as_is, _) = engine_logits(True, device), engine_logits(False, device)
    worst = common.rel_err(fused, as_is) if ran else 1.0
    dr = kernels.load("delta_rule", "solutions").module
    dims = {"H": 2, "HV": 4, "DK": 16, "DV": 32}
    for T, chunk, block_v in ((37, 16, 16), (5, 32, 32), (70, 64, 16)):
        q, k, v, a, b, A_log, dt_bias, s0, z, nw = _inputs(T, dims, torch.float32, device, T)
        for norm in (None, (z, nw, 1e-6)):
            want, want_s = dr.gated_delta_rule_chunked_gates(q, k, v, a, b, A_log, dt_bias, s0.clone(), z=z if norm
                                                             else None, norm_weight=nw if norm else None,
                                                             chunk_size=chunk)
            for prepared in (False, True):
                out = torch.full_like(want, float("nan"))
                got, got_s = fused_chunked(q, k, v, initial_state=s0.clone(), out=out, chunk_size=chunk,
                                           block_v=block_v, gates=(a, b, A_log, dt_bias), norm=norm, prepared=prepared)
                worst = max(worst, common.rel_err(got, want), common.rel_err(got_s, want_s))
        g = torch.nn.functional.logsigmoid(torch.randn(T, dims["HV"], generator=torch.Generator().manual_seed(T)) + 4)
        beta = torch.sigmoid(a.float())
        want, want_s = dr.gated_delta_rule_recurrent(q, k, v, g.to(device), beta, s0.clone())
        for prepared in (False, True):
            got, got_s = fused_chunked(q, k, v, g.to(device), beta, s0.clone(), chunk_size=chunk, block_v=block_v,
                                       prepared=prepared)
            worst = max(worst, common.rel_err(got, want), common.rel_err(got_s, want_s))
    return worst


def main(out):
    common.setup()
    from tritonllm_course.config import QWEN35_0_8B
    from tritonllm_course.engine import Engine
    from tritonllm_course.measure.benchmark import time_calls
    from tritonllm_course.reference import gated_delta_rule_recurrent as ref_rule
    dr = kernels.load("delta_rule", "solutions").module
    budget, t0 = float(os.environ.get("PROBE_S", "300")), time.time()
    path = common.result_path(out, "delta_rule_fused_probe")
    res = common.header(check_rel_err=check("cuda"), shape=SHAPE, rule=[], engine={})
    for T in TS:
        if time.time() - t0 > budget:
            break
        q, k, v, a, b, A_log, dt_bias, s0, z, nw = _inputs(T, SHAPE, torch.bfloat16, "cuda", T)
        sets = [{"s0": s0.clone()} for _ in range(4)]
        gates = (a, b, A_log, dt_bias)
        row = {"T": T, "us": {}, "rel_err": {}}
        calls = {"three kernels + norm": lambda s0: dr.gated_delta_rule_chunked_gates(
            q, k, v, a, b, A_log, dt_bias, s0, final_state=s0, z=z, norm_weight=nw)}
        for chunk in CHUNKS:
            calls[f"fused + norm, chunk {chunk}"] = (lambda s0, c=chunk: fused_chunked(
                q, k, v, initial_state=s0, final_state=s0, chunk_size=c, gates=gates, norm=(z, nw, 1e-6)))
            calls[f"prepare, then scan + output + norm, chunk {chunk}"] = (lambda s0, c=chunk: fused_chunked(
                q, k, v, initial_state=s0, final_state=s0, chunk_size=c, gates=gates, norm=(z, nw, 1e-6),
                prepared=True))
            for bv in BLOCKS:
                calls[f"fused, chunk {chunk}, block_v {bv}"] = (lambda s0, c=chunk, bv=bv: fused_chunked(
                    q, k, v, initial_state=s0, final_state=s0, chunk_size=c, block_v=bv, gates=gates))
                calls[f"prepare, then scan + output, chunk {chunk}, block_v {bv}"] = (
                    lambda s0, c=chunk, bv=bv: fused_chunked(q, k, v, initial_state=s0, final_state=s0, chunk_size=c,
                                                             block_v=bv, gates=gates, prepared=True))
        calls["three kernels"] = lambda s0: dr.gated_delta_rule_chunked_gates(q, k, v, a, b, A_log, dt_bias, s0,
                                                                              final_state=s0)
        beta = torch.sigmoid(b.float())
        g = -torch.exp(A_log)[None, :] * torch.nn.functional.softplus(a.float() + dt_bias[None, :])
        want = ref_rule(q.double(), k.double(), v.double(), g.double(), beta.double(), s0.double())[0]
        for name, call in calls.items():
            try:
                row["us"][name] = time_calls(call, sets)
                if "norm" not in name:       # the error of the rule itself, against fp64
                    row["rel_err"][name] = common.rel_err(call(s0.clone())[0], want)
            except Exception as e:  # noqa: BLE001  (recorded, not fatal)
                row["us"][name] = common.error_text(e)
        res["rule"].append(row)
        print(T, {n: round(u, 1) for n, u in row["us"].items() if isinstance(u, float)}, flush=True)
        common.save(path, res)
    prompt = [(7 * i + 3) % QWEN35_0_8B.vocab_size for i in range(FUSED_MAX_T)]
    for rep in range(2):
        for name in ("as it is", "fused up to 128 tokens"):
            original = dr.gated_delta_rule_chunked_gates
            try:
                with common.replaced(dr, "gated_delta_rule_chunked_gates",
                                     original if name == "as it is" else swapped_gates_rule(original)):
                    engine = Engine.random(QWEN35_0_8B, torch.bfloat16, "cuda", seed=0, max_seq_len=512,
                                           level="fast")
                    ms, token = common.ttft_ms(engine, prompt)
                res["engine"][f"{name} #{rep}"] = {"ttft_ms": ms, "first_token": token}
                del engine
                torch.cuda.empty_cache()
            except Exception as e:  # noqa: BLE001
                res["engine"][f"{name} #{rep}"] = {"error": common.error_text(e)}
            print(name, rep, res["engine"][f"{name} #{rep}"], flush=True)
            common.save(path, res)
    return res


if __name__ == "__main__":
    main(common.out_dir())
