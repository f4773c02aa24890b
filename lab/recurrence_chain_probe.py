"""Does the decode recurrence get faster with its sums in one round instead of three in a row?

    python -m lab.recurrence_chain_probe [OUTDIR]   (on an sm_90 GPU; writes
                                                    OUTDIR/recurrence_chain_probe_<gpu>_<date>.json)

Question: in the PDL decode step the recurrence with its gates (`recurrent_gates_kernel`, chapter
22_layer_fusion) is the largest stretch above the floor among the small kernels: 101.6 us a token for 18
calls on an H100 (results/profile_nvidia-h100-80gb-hbm3_2026-12-06.md, fast level, 128 cached tokens), 3.1
us a call launched op by op. Its state is loaded before the wait; after it, each token runs a chain of
dependent sums over the 128 key dims: the q and k norms, then S^T k (the prediction), then, after the rank-1
update, S^T q (the read). Every sum is a cross-lane reduction that waits for the one before. But the read
needs no updated state: with the decayed state exp(g) S, the normalised k = rk k and q = rq q,

    u = beta (v - exp(g) rk S^T k),    o = S_new^T q = exp(g) rq S^T q + u rk rq (k . q),

so S^T k, S^T q, k . q, |k|^2 and |q|^2 are five independent sums of the raw q and k: one round. Does the
shorter chain shorten the step?
Method: `one_round_kernel` below, the engine's kernel with that one change (the same launch, state load
before the wait and trigger at entry), checked against the fp64 reference under the interpreter (`check`).
On the GPU: (1) both kernels alone at one token of Qwen3.5-0.8B's shapes (16 heads, 128 x 128), each call
timed as the course times (`benchmark.time_calls`, a CUDA graph over copies of the inputs); (2) the engine's
fast level with the variant kernel in place of `recurrent_gates_kernel` (the solutions' wrapper launching
it; random weights of the real shapes, bf16, its CUDA graph, PDL) at 128 and 4,096 cached tokens, alternated
with the engine as it is over REPEATS rounds, us per token by CUDA events, greedy tokens compared (the sums'
order changes, so a token may differ where two logits are close).
Result: NVIDIA H100 80GB HBM3, 2026-12-06 (lab/results/recurrence_chain_probe_nvidia-h100-80gb-hbm3_2026-12-06.json;
triton 3.6). Alone, a call: 3.47 us as is, 3.34 us in one round (4% less). In the engine, us a token over two
rounds: at 128 cached tokens 750.4 / 751.0 as is against 770.7 / 770.7 in one round (20 us slower), at 4,096
775.1 / 775.4 against 777.1 / 778.6. The one-round tokens part from the engine's after 12 (128) and 9 (4,096)
tokens, the same in both rounds (the sums' order). So the shorter chain saves a tenth of a microsecond alone and
costs 20 us a token where the kernel runs behind the in-projection under PDL: the stretch the recurrence adds
in the step is not its chain of sums.
Verdict: not adopted: solutions/layer_fusion.py keeps `recurrent_gates_kernel`.
"""
import functools
from contextlib import contextmanager

import torch
import triton
import triton.language as tl

from lab import common
from tritonllm_course.triton_helpers import pdl_launch_dependents, pdl_wait, sigmoid, softplus

CONTEXTS = (128, 4096)
REPEATS = 2
SHAPE = {"H": 16, "HV": 16, "DK": 128, "DV": 128}


@triton.jit
def one_round_kernel(q_ptr, k_ptr, v_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, s0_ptr, o_ptr, st_ptr,
                     T, sq, sk, sv, sa, sb, q_scale, eps, H: tl.constexpr, HV: tl.constexpr,
                     DK: tl.constexpr, DV: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                     HAS_S0: tl.constexpr, QK_NORM: tl.constexpr, PDL: tl.constexpr = False):
    """`recurrent_gates_kernel` with each token's sums over the key dims in one round (the docstring above)."""
    if PDL:
        pdl_launch_dependents()
    hv = tl.program_id(0)
    h = hv // (HV // H)
    rk = tl.arange(0, BK)
    rv = tl.program_id(1) * BV + tl.arange(0, BV)
    mk, mv = rk < DK, rv < DV
    state = hv * DK * DV + rk[:, None] * DV + rv[None, :]   # [BK, BV] offsets into [HV, DK, DV]
    smask = mk[:, None] & mv[None, :]
    decay_rate = -tl.exp(tl.load(A_log_ptr + hv).to(tl.float32))
    dt_bias = tl.load(dt_bias_ptr + hv).to(tl.float32)
    if HAS_S0:
        S = tl.load(s0_ptr + state, mask=smask, other=0.0)
    else:
        S = tl.zeros([BK, BV], dtype=tl.float32)
    if PDL:
        pdl_wait()
    for t in range(T):
        q = tl.load(q_ptr + t * sq + h * DK + rk, mask=mk, other=0.0).to(tl.float32)     # [BK], as stored
        k = tl.load(k_ptr + t * sk + h * DK + rk, mask=mk, other=0.0).to(tl.float32)
        v = tl.load(v_ptr + t * sv + hv * DV + rv, mask=mv, other=0.0).to(tl.float32)   # [BV]
        beta = sigmoid(tl.load(b_ptr + t * sb + hv).to(tl.float32))
        decay = tl.exp(decay_rate * softplus(tl.load(a_ptr + t * sa + hv).to(tl.float32) + dt_bias))
        # one round: five sums of the raw q and k, none waiting for another
        s_k = tl.sum(S * k[:, None], axis=0)                   # [BV]
        s_q = tl.sum(S * q[:, None], axis=0)                   # [BV]
        kq = tl.sum(k * q, axis=0)
        if QK_NORM:
            k_scale = tl.rsqrt(tl.sum(k * k, axis=0) + eps)
            q_norm = tl.rsqrt(tl.sum(q * q, axis=0) + eps) * q_scale
        else:
            k_scale = 1.0
            q_norm = 1.0
        u = beta * (v - decay * k_scale * s_k)                 # the prediction's error for k: [BV]
        o = decay * q_norm * s_q + u * (k_scale * q_norm * kq)  # S_new^T q without S_new
        tl.store(o_ptr + (t * HV + hv) * DV + rv, o.to(o_ptr.dtype.element_ty), mask=mv)
        S = S * decay + (k * k_scale)[:, None] * u[None, :]   # the state the next token reads
    tl.store(st_ptr + state, S, mask=smask)


@functools.lru_cache(maxsize=None)
def _layer_fusion():
    from tritonllm_course import kernels
    return kernels.load("layer_fusion", "solutions").module


@contextmanager
def swapped(variant: str):
    """For "one round", `one_round_kernel` in place of the solutions' `recurrent_gates_kernel`, which their
    wrapper `gated_delta_rule_recurrent_gates` (validation, grid, launch) reads at each call; as it was after."""
    lf = _layer_fusion()
    saved = lf.recurrent_gates_kernel
    if variant == "one round":
        lf.recurrent_gates_kernel = one_round_kernel
    try:
        yield
    finally:
        lf.recurrent_gates_kernel = saved


def _inputs(T, H, HV, DK, DV, device, dtype, gen, raw=True):
    """q, k as the conv leaves them (raw) or L2-normalised; v, a, b, A_log, dt_bias; s0 fp32."""
    q, k = (torch.randn(T, H, DK, generator=gen).to(device) for _ in range(2))
    if not raw:
        q, k = (torch.nn.functional.normalize(x, dim=-1) for x in (q, k))
    return {"q": q.to(dtype), "k": k.to(dtype), "v": torch.randn(T, HV, DV, generator=gen).to(device, dtype),
            "a": torch.randn(T, HV, generator=gen).to(device, dtype),
            "b": torch.randn(T, HV, generator=gen).to(device, dtype),
            "A_log": torch.rand(HV, generator=gen).to(device), "dt_bias": torch.randn(HV, generator=gen).to(device),
            "initial_state": torch.randn(HV, DK, DV, generator=gen).to(device)}


def check(device=None) -> float:
    """`one_round_kernel` (through the solutions' wrapper) against the fp64 reference (odd head dims, GQA,
    three tokens, with and without the q/k norm, at each value block), and the tiny fast engine's greedy
    tokens with it against as it is (in fp32 under the interpreter the two sum orders round alike there): the
    largest relative error plus the share of differing tokens."""
    from tritonllm_course.config import TINY
    from tritonllm_course.engine import Engine
    from tritonllm_course.reference.fusion import gated_delta_rule_recurrent_gates as reference
    from tritonllm_course.runtime import runtime
    device = device or runtime().device
    gen = torch.Generator().manual_seed(0)
    worst = 0.0
    for qk_norm in (False, True):
        for T, H, HV, DK, DV, block_v in ((3, 2, 4, 24, 40, 8), (2, 1, 2, 32, 32, 16), (1, 2, 2, 16, 48, 32)):
            inp = _inputs(T, H, HV, DK, DV, device, torch.float32, gen, raw=qk_norm)
            want, want_s = reference(**{n: x.double() for n, x in inp.items()}, qk_norm=qk_norm)
            with swapped("one round"):
                out, state = _layer_fusion().gated_delta_rule_recurrent_gates(
                    **{**inp, "initial_state": inp["initial_state"].clone()}, block_v=block_v, qk_norm=qk_norm)
            worst = max(worst, common.rel_err(out.cpu(), want.cpu()), common.rel_err(state.cpu(), want_s.cpu()))
    runs = {}
    prompt = [3, 1, 4, 1, 5]
    for variant in ("as is", "one round"):
        with swapped(variant):
            engine = Engine.random(TINY, dtype=torch.float32 if device == "cpu" else torch.bfloat16,
                                   device=device, seed=0, max_seq_len=16, level="fast")
            runs[variant] = engine.generate(prompt, 3)
    differing = sum(a != b for a, b in zip(runs["as is"], runs["one round"])) / len(runs["as is"])
    return worst + differing


def kernel_us() -> dict:
    """Each kernel alone at one token of the real shapes (q, k raw, the norm in the kernel, as the engine
    calls it), us per call over copies of the inputs past L2."""
    from tritonllm_course.measure.benchmark import time_calls
    lf = _layer_fusion()
    gen = torch.Generator().manual_seed(1)
    sets = []
    for _ in range(common.copies_past_l2(SHAPE["HV"] * SHAPE["DK"] * SHAPE["DV"] * 4)):
        inp = _inputs(1, **SHAPE, device="cuda", dtype=torch.bfloat16, gen=gen)
        sets.append({**inp, "out": torch.empty(1, SHAPE["HV"], SHAPE["DV"], device="cuda", dtype=torch.bfloat16),
                     "final_state": inp["initial_state"]})
    us = {}
    for variant in ("as is", "one round"):
        with swapped(variant):
            us[variant] = time_calls(lambda **s: lf.gated_delta_rule_recurrent_gates(**s, qk_norm=True), sets)
    return us


def engine_us(variant: str, context: int, tokens: int = 64) -> dict:
    with swapped(variant):
        return common.fast_decode_us(context, tokens)


def main(out):
    common.setup()
    res = common.header(check=check("cuda"), shape=SHAPE, engine={})
    path = common.result_path(out, "recurrence_chain_probe")
    res["kernel_us"] = kernel_us()
    print("kernels alone:", res["kernel_us"], flush=True)
    common.save(path, res)
    variants = {"as is": "as is", "one round": "one round"}
    res["tokens_equal_as_is"] = common.engine_variants(res, path, variants, engine_us, CONTEXTS, REPEATS, "as is")
    print("tokens equal:", res["tokens_equal_as_is"], flush=True)
    common.save(path, res)
    return res


if __name__ == "__main__":
    main(common.out_dir())
