"""Does the DeltaNet recurrence, run inside the in-projection's launch, shorten the decode step?

    python -m lab.deltanet_head_fusion_probe [OUTDIR]   (on an sm_90 GPU; writes
                                                        OUTDIR/deltanet_head_fusion_probe_<gpu>_<date>.json)

Question: under PDL the fast level's DeltaNet layer runs three decode kernels: the in-projection with ln1
and the conv's step, the recurrence with the gates and the q/k L2 norm, and the gated norm + out_proj +
residual. The recurrence costs ~4.5 us a layer for ~9 us of state bytes in all (docs/results.md section 3;
lab/deltanet_pdl_probe.py: not its launch shape). In the in-projection's launch, a head's recurrence could
start as soon as its own rows are stored, while the z rows still run: is the step shorter?
Method: `in_proj_recurrence_kernel`, one launch. Its first programs are the fast level's in-projection
(`fused_gemv_kernel` of solutions/norm_fusion.py, same config); after its stores every program adds the
number of a head's rows it wrote to that head's int32 counter (acq_rel, GPU scope). (a) last-arriver: the
program that completes a head's count resets it and runs the head's recurrence
(`delta_rule.delta_rule_step`, value blocks of 32 or 16), reading the inputs back with `.cg` loads; the
b and a rows run first (`ab_first`) so that heads complete in different programs. (b) tail programs: one
per (head, value block) after the projection's, each loading its state slice before the PDL wait and
spinning on the head's counter. Registers a thread (sm_90, `sass_check`): the projection alone 40, (a) 94
at blocks of 32 and 64 at 16, (b) 72 at 32 and 40 at 8 (the data file's `sass`). `head_fusion` swaps the
launch into the engine's fast decode step (Qwen3.5-0.8B, random weights of the real shapes, bf16, CUDA
graph, PDL); us per token at 128 and 4,096 cached tokens by CUDA events over 64 replays, each variant twice,
alternated; greedy tokens against the engine's as it is.
`check` (CPU interpreter or GPU, fp32): the launch against the reference in-projection + conv and the
fp64 rule over four calls (the counters' reset), at 1 and 3 value heads a key head and odd head sizes,
outputs NaN-poisoned; the two (a) orders bit for bit; the tiny engine's tokens and logits with and without
the swap. The interpreter runs programs one at a time, so it shows the counting, the head mapping and the
reset, but not a race, a missing fence or a deadlock of (b); on the GPU `check` runs the same comparisons
on concurrent programs.
Result: NVIDIA H200, 2026-12-03 (lab/results/deltanet_head_fusion_probe_nvidia-h200_2026-12-03.json; check
1.2e-6 on the GPU), us per token at 128 / 4,096 cached tokens, two runs each: as it is 627.2, 625.4 / 665.2,
655.2; (a) b/a first, blocks of 32 768.4, 767.7 / 802.6, 801.4; blocks of 16 880.1, 881.2 / 901.3, 903.1;
rows in order 1,082 / 1,161; (b) blocks of 32 654.1, 656.8 / 674.5, 673.9; blocks of 8 666.8, 659.6 /
672.5, 669.4. (a) loses 137-146 us: its registers leave fewer projection programs resident, and a head's last
program runs the recurrence alone. (b) loses 27-40 us at 128 and 7-19 at 4,096 (either block, against the
same run as it is), up to 2.2 us a layer: its spinning programs hold SMs that the projection's last wave needs.
Greedy tokens equal the engine's at 4,096 and differ at 128 (another reduction tree).
Verdict: not adopted: the in-projection (solutions/norm_fusion.py) and the recurrence
(solutions/layer_fusion.py) stay two launches; under PDL the recurrence's launch already overlaps the
in-projection's tail.
"""
import math

import torch
import triton
import triton.language as tl

from lab import common
from tritonllm_course import kernels, validate
from tritonllm_course.runtime import pdl_args, programmatic_launches, runtime
from tritonllm_course.triton_helpers import pdl_launch_dependents, pdl_wait, sigmoid, softplus

delta_rule_step = kernels.load("delta_rule", "solutions").module.delta_rule_step      # chapter 15_delta_rule's

NF = kernels.load("norm_fusion", "solutions").module        # the fast level's in-projection, called as a function
CONTEXTS = (128, 4096)
REPEATS = 2
BLOCK_V = 32                 # value columns of the state a recurrence step holds (a [DK, 32] fp32 slice)
PLANTED = {None: 0, "no_reset": 1, "head_map": 2}   # bugs the tests plant, to see the check catch them


@triton.jit
def key_head(hv, H: tl.constexpr, HV: tl.constexpr, PLANTED: tl.constexpr = 0):
    """The key head whose q and k value head hv reads (GQA: HV / H value heads a key head)."""
    if PLANTED == 2:
        return hv % H            # a planted bug: the heads interleaved instead of grouped
    return hv // (HV // H)


@triton.jit
def _overlap(r0, r1, lo, n):
    """How many of the rows [lo, lo + n) lie in [r0, r1)."""
    return tl.maximum(tl.minimum(r1, lo + n) - tl.maximum(r0, lo), 0)


@triton.jit
def head_rows(r0, r1, hv, hk, H: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr):
    """The rows [r0, r1) of the merged in-projection [q | k | v | z | b | a] that value head hv (key head hk)
    reads: of its key head's q and k, its v, its b and its a (2 DK + DV + 2 rows in all)."""
    ab = 2 * H * DK + 2 * HV * DV                                   # the first b row
    return (_overlap(r0, r1, hk * DK, DK) + _overlap(r0, r1, (H + hk) * DK, DK)
            + _overlap(r0, r1, 2 * H * DK + hv * DV, DV) + _overlap(r0, r1, ab + hv, 1)
            + _overlap(r0, r1, ab + HV + hv, 1))


@triton.jit
def head_inputs(y_ptr, A_log_ptr, dt_bias_ptr, hv, hk, q_scale, eps, H: tl.constexpr, HV: tl.constexpr,
                DK: tl.constexpr, DV: tl.constexpr, BK: tl.constexpr):
    """Value head hv's q and k (L2-normalised, q times q_scale) [BK], its decay g and beta, in fp32, as
    `recurrent_gates_kernel` computes them. The projection's rows y are read with ".cg" loads: in L2, where
    the programs of other SMs stored them (this SM's L1 is not coherent with theirs)."""
    rk = tl.arange(0, BK)
    mk = rk < DK
    q = tl.load(y_ptr + hk * DK + rk, mask=mk, other=0.0, cache_modifier=".cg").to(tl.float32)
    k = tl.load(y_ptr + (H + hk) * DK + rk, mask=mk, other=0.0, cache_modifier=".cg").to(tl.float32)
    q = q * (tl.rsqrt(tl.sum(q * q, axis=0) + eps) * q_scale)
    k = k * tl.rsqrt(tl.sum(k * k, axis=0) + eps)
    ab = y_ptr + 2 * H * DK + 2 * HV * DV                           # b [HV], then a [HV]
    beta = sigmoid(tl.load(ab + hv, cache_modifier=".cg").to(tl.float32))
    decay_rate = -tl.exp(tl.load(A_log_ptr + hv).to(tl.float32))
    dt_bias = tl.load(dt_bias_ptr + hv).to(tl.float32)
    g = decay_rate * softplus(tl.load(ab + HV + hv, cache_modifier=".cg").to(tl.float32) + dt_bias)
    return q, k, g, beta


@triton.jit
def state_block(state_ptr, hv, v0, DK: tl.constexpr, DV: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    """The state's columns v0 .. v0 + BV of value head hv [BK, BV] (fp32, 0 outside [DK, DV])."""
    rk, rv = tl.arange(0, BK), v0 + tl.arange(0, BV)
    offs = hv * DK * DV + rk[:, None] * DV + rv[None, :]
    return tl.load(state_ptr + offs, mask=(rk < DK)[:, None] & (rv < DV)[None, :], other=0.0)


@triton.jit
def value_block_step(y_ptr, state_ptr, o_ptr, S, q, k, g, beta, hv, v0, H: tl.constexpr, DK: tl.constexpr,
                     DV: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    """The delta rule's step on head hv's state slice S (columns v0 .. v0 + BV): o and the slice stored."""
    rk, rv = tl.arange(0, BK), v0 + tl.arange(0, BV)
    mv = rv < DV
    v = tl.load(y_ptr + 2 * H * DK + hv * DV + rv, mask=mv, other=0.0, cache_modifier=".cg").to(tl.float32)
    S, o = delta_rule_step(S, q, k, v, g, beta)
    tl.store(o_ptr + hv * DV + rv, o.to(o_ptr.dtype.element_ty), mask=mv)
    tl.store(state_ptr + hv * DK * DV + rk[:, None] * DV + rv[None, :], S, mask=(rk < DK)[:, None] & mv[None, :])


@triton.jit
def in_proj_recurrence_kernel(x_ptr, norm_w_ptr, w_ptr, y_ptr, N, K, eps, conv_w_ptr, conv_state_ptr,
                              A_log_ptr, dt_bias_ptr, state_ptr, o_ptr, count_ptr, q_scale, qk_eps,
                              H: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
                              BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, KC: tl.constexpr, UNROLL: tl.constexpr,
                              BK: tl.constexpr, BV: tl.constexpr, HVB: tl.constexpr, AB_FIRST: tl.constexpr = True,
                              TAIL: tl.constexpr = False, PLANTED: tl.constexpr = 0, PDL: tl.constexpr = False):
    """A DeltaNet layer's in-projection (ln1, the conv's step) and its recurrence in one launch (one token).

    Programs 0 .. cdiv(N, BLOCK_N) - 1: `fused_gemv_kernel` with the conv, one block of BLOCK_N rows of
    y = [silu(conv(q | k | v)) | z | b | a] each (AB_FIRST: the b and a rows' blocks first); then each adds
    the rows it stored of each value head to count[hv]. Not TAIL: the program that completes a head's count
    resets it and runs that head's recurrence. TAIL: programs from cdiv(N, BLOCK_N) on, one per (head, value
    block), wait for the head's count and run their block. o [HV, DV] in o's dtype; the state [HV, DK, DV]
    fp32, in place. PLANTED: 0, or a bug for the tests (1: no reset, 2: the key heads interleaved)."""
    C: tl.constexpr = 2 * H * DK + HV * DV          # the conv's channels: q, k, v
    TOTAL: tl.constexpr = 2 * DK + DV + 2           # the rows a value head reads
    pid = tl.program_id(0)
    blocks = tl.cdiv(N, BLOCK_N)
    if pid < blocks:
        blk = pid
        if AB_FIRST:            # the blocks of the b and a rows (the last ones) first
            first = (C + HV * DV) // BLOCK_N
            blk = tl.where(pid < blocks - first, first + pid, pid - (blocks - first))
        # program pid computes block blk: the function's pointers (and bounds) shifted by d rows, the same code
        d = (blk - pid) * BLOCK_N
        NF.fused_gemv_kernel(x_ptr, norm_w_ptr, w_ptr + d.to(tl.int64) * K, w_ptr, y_ptr + d, N - d, K, eps,
                             conv_w_ptr + d * KC, conv_state_ptr + d * KC, C - d, HAS_NORM=True, GATED=False,
                             BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, CONV=True, KC=KC, UNROLL=UNROLL, PDL=PDL)
        r0 = blk * BLOCK_N
        if (r0 < C) | (r0 + BLOCK_N > C + HV * DV):     # rows of q, k, v, b or a: not z alone
            tl.debug_barrier()  # every thread's stores (the conv's, the last) before the count
            hv = tl.arange(0, HVB)
            mine = head_rows(r0, r0 + BLOCK_N, hv, key_head(hv, H, HV, PLANTED), H, HV, DK, DV)
            take = (hv < HV) & (mine > 0)
            if TAIL:            # release: this program's rows stored before the count
                tl.atomic_add(count_ptr + hv, mine, mask=take, sem="release", scope="gpu")
            else:               # and acquire: the other programs' rows stored before the rule reads them
                before = tl.atomic_add(count_ptr + hv, mine, mask=take, sem="acq_rel", scope="gpu")
                last = (take & (before + mine == TOTAL)).to(tl.int32)    # the heads this program completes
                if tl.max(last, axis=0) > 0:
                    tl.debug_barrier()      # the acquiring threads' view before any thread reads
                    for j in range(HV):
                        if tl.sum(tl.where(hv == j, last, 0), axis=0) > 0:
                            if PLANTED != 1:    # every producer of head j has counted; relaxed: the next
                                # launch counts after the kernel boundary (or PDL's wait for this whole grid)
                                tl.atomic_xchg(count_ptr + j, 0, sem="relaxed", scope="gpu")
                            q, k, g, beta = head_inputs(y_ptr, A_log_ptr, dt_bias_ptr, j,
                                                        key_head(j, H, HV, PLANTED), q_scale, qk_eps,
                                                        H, HV, DK, DV, BK)
                            for v0 in range(0, DV, BV):
                                S = state_block(state_ptr, j, v0, DK, DV, BK, BV)
                                value_block_step(y_ptr, state_ptr, o_ptr, S, q, k, g, beta, j, v0, H, DK, DV,
                                                 BK, BV)
    elif TAIL:                  # (b) a tail program: value block v0 of head hv
        NVB: tl.constexpr = (DV + BV - 1) // BV
        t = pid - blocks
        hv = t // NVB
        v0 = (t % NVB) * BV
        if PDL:
            pdl_launch_dependents()
        S = state_block(state_ptr, hv, v0, DK, DV, BK, BV)   # only this kernel writes it, in the step before
        if PDL:
            pdl_wait()
        seen = tl.atomic_add(count_ptr + hv, 0, sem="acquire", scope="gpu")
        while seen < TOTAL:
            seen = tl.atomic_add(count_ptr + hv, 0, sem="acquire", scope="gpu")
        tl.debug_barrier()
        q, k, g, beta = head_inputs(y_ptr, A_log_ptr, dt_bias_ptr, hv, key_head(hv, H, HV, PLANTED), q_scale, qk_eps,
                                    H, HV, DK, DV, BK)
        value_block_step(y_ptr, state_ptr, o_ptr, S, q, k, g, beta, hv, v0, H, DK, DV, BK, BV)
        done = tl.atomic_add(count_ptr + hv, 1, sem="relaxed", scope="gpu")   # past its wait: TOTAL + blocks done
        if PLANTED != 1:
            if done == TOTAL + NVB - 1:     # the head's last block: every block has seen the total
                tl.atomic_xchg(count_ptr + hv, 0, sem="relaxed", scope="gpu")


def in_proj_recurrence(x, norm_weight, weight, conv_weight, conv_state, A_log, dt_bias, state, heads, eps=1e-6,
                       qk_eps=1e-6, out=None, o=None, counts=None, block_v=BLOCK_V, ab_first=True, tail=False,
                       planted=None):
    """`rms_norm_linear_conv` then `gated_delta_rule_recurrent_gates(..., qk_norm=True)` on its q, k, v, a,
    b, in one launch (one token).

    x [1, K]; norm_weight [K]; weight [N, K], the merged in-projection [q | k | v | z | b | a]; conv_weight,
    conv_state [C, KC] (C = 2 H DK + HV DV; the state in x's dtype, rolled in place); A_log, dt_bias [HV];
    state [HV, DK, DV] fp32, updated in place; heads = (H, HV, DK, DV). out [1, N], o (HV * DV elements,
    x's dtype) and counts (int32 [HV] of zeros, left 0) are allocated if None. ab_first, tail, planted: see
    the kernel. Returns (out, o, state)."""
    H, HV, DK, DV = heads
    if H < 1 or HV % H:
        raise ValueError(f"{HV} value heads are not a multiple of {H} key heads")
    C = 2 * H * DK + HV * DV
    validate.tensor(x, "x", dtype=validate.FLOATS, ndim=2)
    if x.shape[0] != 1:
        raise ValueError(f"x has shape {list(x.shape)}: one token [1, K]")
    K = x.shape[1]
    N = C + HV * DV + 2 * HV
    validate.tensor(weight, "weight", dtype=x.dtype, shape=(N, K))
    validate.tensor(norm_weight, "norm_weight", dtype=validate.FLOATS, shape=(K,))
    validate.tensor(conv_weight, "conv_weight", dtype=validate.FLOATS, ndim=2)
    KC = conv_weight.shape[1]
    validate.tensor(conv_weight, "conv_weight", shape=(C, KC))
    validate.tensor(conv_state, "conv_state", dtype=x.dtype, shape=(C, KC))
    validate.tensor(A_log, "A_log", dtype=validate.FLOATS, shape=(HV,))
    validate.tensor(dt_bias, "dt_bias", dtype=validate.FLOATS, shape=(HV,))
    validate.tensor(state, "state", dtype=torch.float32, shape=(HV, DK, DV))
    if block_v not in (8, 16, 32, 64, 128):
        raise ValueError(f"block_v must be 8, 16, 32, 64 or 128, got {block_v}")
    device = validate.same_device(x=x, norm_weight=norm_weight, weight=weight, conv_weight=conv_weight,
                                  conv_state=conv_state, A_log=A_log, dt_bias=dt_bias, state=state)
    out = validate.output(out, "out", (1, N), x.dtype, device)
    if o is None:
        o = torch.empty(1, HV, DV, dtype=x.dtype, device=device)
    if o.numel() != HV * DV or not o.is_contiguous() or o.dtype != x.dtype:
        raise ValueError(f"o must be {HV * DV} contiguous elements of {x.dtype}, got {tuple(o.shape)} {o.dtype}")
    if counts is None:
        counts = torch.zeros(HV, dtype=torch.int32, device=device)
    validate.tensor(counts, "counts", dtype=torch.int32, shape=(HV,), device=device.type)
    pdl = pdl_args()
    cfg = NF.fused_gemv_config(N, K, runtime().interpreted, norm=True, conv=True, pdl=pdl["PDL"])
    blocks = triton.cdiv(N, cfg["BLOCK_N"])
    tails = HV * triton.cdiv(DV, block_v) if tail else 0
    in_proj_recurrence_kernel[(blocks + tails,)](
        x, norm_weight, weight, out, N, K, eps, conv_weight, conv_state, A_log, dt_bias, state, o, counts,
        DK ** -0.5, qk_eps, H=H, HV=HV, DK=DK, DV=DV, BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], KC=KC,
        UNROLL=cfg["UNROLL"], BK=max(16, triton.next_power_of_2(DK)), BV=block_v,
        HVB=max(2, triton.next_power_of_2(HV)), AB_FIRST=bool(ab_first), TAIL=bool(tail),
        PLANTED=PLANTED[planted], num_warps=cfg["num_warps"], **pdl)
    return out, o, state


def head_fusion(engine, **options) -> None:
    """The engine's decode DeltaNet in-projection and recurrence swapped for `in_proj_recurrence`: the
    in-projection's call keeps its arguments (no kernel), the recurrence's call runs the one launch on both
    calls' buffers (after checking that its q, k, v, a, b are the views of that in-projection's output the
    kernel reads). options: `in_proj_recurrence`'s block_v, ab_first, tail, planted."""
    c, f = engine.config, engine.plan.decode
    if not (f.conv_into_in_proj and f.gates_into_delta_rule and f.gated_norm_into_out_proj):
        raise ValueError(f"the engine's decode plan does not run the fast level's DeltaNet kernels: {f}")
    heads = H, HV, DK, DV = (c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim,
                             c.linear_value_head_dim)
    counts = torch.zeros(HV, dtype=torch.int32, device=engine.device)
    stash = {}

    def in_proj(x, norm_weight, weight, eps, out, conv_weight, conv_state):
        if stash:
            raise RuntimeError("a DeltaNet in-projection without its recurrence after it")
        stash.update(x=x, norm_weight=norm_weight, weight=weight, eps=eps, out=out, conv_weight=conv_weight,
                     conv_state=conv_state)

    def delta_rule(q, k, v, a, b, A_log, dt_bias, initial_state, final_state, out, qk_norm=False, eps=1e-6):
        s = dict(stash)
        stash.clear()
        if not s:
            raise RuntimeError("a DeltaNet recurrence without its in-projection before it")
        y = s["out"]
        size = y.element_size()
        offsets = {"q": 0, "k": H * DK, "v": 2 * H * DK, "b": 2 * H * DK + 2 * HV * DV,
                   "a": 2 * H * DK + 2 * HV * DV + HV}
        for name, t in (("q", q), ("k", k), ("v", v), ("b", b), ("a", a)):
            if t.data_ptr() != y.data_ptr() + offsets[name] * size:
                raise ValueError(f"{name} is not the in-projection's output at row {offsets[name]}")
        if not qk_norm or initial_state is None or final_state.data_ptr() != initial_state.data_ptr():
            raise ValueError("the one launch takes the decode step's rule: qk_norm, the state updated in place")
        in_proj_recurrence(s["x"], s["norm_weight"], s["weight"], s["conv_weight"], s["conv_state"], A_log,
                           dt_bias, final_state, heads, eps=s["eps"], qk_eps=eps, out=y, o=out, counts=counts,
                           **options)

    engine.ops.decode.dn_in_proj, engine.ops.decode.delta_rule = in_proj, delta_rule


# registers a thread (`sass_check`, sm_90, the run of 2026-12-03): the in-projection alone 40 (12 programs of 4
# warps an SM); (a) 94 at value blocks of 32 (5 an SM), 64 at 16 and at 8; (b) 72 at 32, 48 at 16, 40 at 8
VARIANTS = {"as is": None, "recurrence in the in-projection's launch": {},
            "recurrence in the in-projection's launch, value blocks of 16": {"block_v": 16},
            "recurrence in the in-projection's launch, rows in order": {"ab_first": False},
            "(b) tail programs": {"tail": True},
            "(b) tail programs, value blocks of 8": {"tail": True, "block_v": 8}}
MODES = {"last-arriver, b/a first": {}, "last-arriver, rows in order": {"ab_first": False},
         "tail programs": {"tail": True}}


def engine_us(variant, context: int, tokens: int = 64) -> dict:
    setup = None if variant is None else (lambda engine: head_fusion(engine, **variant))
    return common.fast_decode_us(context, tokens, setup=setup)


def _finite(e: float) -> float:
    """An error as a number a max keeps: NaN (an output never written) as infinity."""
    return e if e == e else math.inf


# odd shapes: (H, HV, DK, DV, K); TINY's heads, 3 value heads a key head, odd head sizes (partial blocks)
SHAPES = ((2, 4, 32, 32, 128), (2, 6, 32, 32, 96), (1, 3, 24, 40, 131))


def kernel_error(shapes=SHAPES, modes=None, steps: int = 4, planted=None, device=None) -> float:
    """The one launch (each mode of `modes`, default MODES) against the reference in-projection + conv and
    the reference rule in fp64, `steps` calls in a row on evolving states (one counts buffer), outputs
    NaN-poisoned before each call: the largest relative error of out, o, the state and the conv state,
    plus 1 for counts left non-zero, plus 1 where the two last-arriver orders differ in a bit. On an sm_90
    GPU launched with PDL (the engine's tiles: 4 rows a program), its programs really concurrent."""
    from tritonllm_course.reference.fusion import gated_delta_rule_recurrent_gates as rule, rms_norm_linear_conv
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    pdl = device == "cuda" and torch.cuda.get_device_capability() >= (9, 0)   # the engine's configs: PDL's tiles
    modes = MODES if modes is None else modes
    worst = 0.0
    for si, (H, HV, DK, DV, K) in enumerate(shapes):
        gen = torch.Generator().manual_seed(si)
        rnd = lambda *s, scale=1.0: (scale * torch.randn(*s, generator=gen, dtype=torch.float64))  # noqa: E731
        C = 2 * H * DK + HV * DV
        N = C + HV * DV + 2 * HV
        xs = [rnd(1, K) for _ in range(steps)]
        nw, W, cw = rnd(K, scale=0.1), rnd(N, K, scale=K ** -0.5), rnd(C, 4, scale=0.5)
        A_log = torch.log(torch.empty(HV, dtype=torch.float64).uniform_(1, 16, generator=gen))
        dt_bias = rnd(HV) - 1.0
        cs0, s0 = rnd(C, 4), rnd(HV, DK, DV, scale=0.3)
        want, cs, s = [], cs0.clone(), s0.clone()
        for x in xs:                                    # the reference, step by step in fp64
            y, cs = rms_norm_linear_conv(x, nw, W, cw, cs, 1e-6)
            q, k, v = y[:, :H * DK].view(1, H, DK), y[:, H * DK:2 * H * DK].view(1, H, DK), y[:, 2 * H * DK:C]
            b, a = y[:, C + HV * DV:C + HV * DV + HV], y[:, C + HV * DV + HV:]
            o, s = rule(q, k, v.reshape(1, HV, DV), a, b, A_log, dt_bias, s, qk_norm=True)
            want.append((y.clone(), o.clone(), s.clone(), cs.clone()))
        f32 = lambda t: t.to(torch.float32).to(device)   # noqa: E731
        outs = {}
        for name, mode in modes.items():
            counts = torch.zeros(HV, dtype=torch.int32, device=device)
            cs, s, got = f32(cs0), f32(s0), []
            for x, (wy, wo, ws, wcs) in zip(xs, want):
                out = torch.full((1, N), float("nan"), device=device)
                o = torch.full((1, HV, DV), float("nan"), device=device)
                with programmatic_launches(pdl):
                    in_proj_recurrence(f32(x), f32(nw), f32(W), f32(cw), cs, f32(A_log), f32(dt_bias), s,
                                       (H, HV, DK, DV), out=out, o=o, counts=counts, planted=planted, **mode)
                for g, w in ((out, wy), (o, wo), (s, ws), (cs, wcs)):
                    worst = max(worst, _finite(common.rel_err(g.cpu(), w)))
                worst = max(worst, float(counts.any()))
                got.append(torch.cat([out.flatten(), o.flatten(), s.flatten()]).cpu())
            outs[name] = torch.stack(got)
        orders = [outs[n] for n in ("last-arriver, b/a first", "last-arriver, rows in order") if n in outs]
        if len(orders) == 2 and not torch.equal(*orders):
            worst += 1.0
    return worst


def engine_error(config, variants=None, prompt=(3, 1, 4, 1, 5), steps: int = 3) -> float:
    """The tiny engine (fast level, fp32, no CUDA graph) prefilled once; `steps` decode steps as it is, then
    with each variant (`head_fusion`'s options, default MODES) from the same cache: the fraction of
    differing greedy tokens plus the largest relative error of the logits, over all variants."""
    from tritonllm_course.engine import Engine
    device = "cuda" if torch.cuda.is_available() else "cpu"
    variants = MODES if variants is None else variants
    engine = Engine.random(config, dtype=torch.float32, device=device, seed=0, max_seq_len=40, level="fast",
                           cuda_graph=False)
    engine.prefill(list(prompt))
    saved = [t.clone() for t in (*engine.cache.storage, engine.counters.ids, engine.counters.steps)]
    length, ops = engine.length, (engine.ops.decode.dn_in_proj, engine.ops.decode.delta_rule)

    def run(variant):
        for t, s in zip((*engine.cache.storage, engine.counters.ids, engine.counters.steps), saved):
            t.copy_(s)
        engine.length = length
        engine.ops.decode.dn_in_proj, engine.ops.decode.delta_rule = ops
        if variant is not None:
            head_fusion(engine, **variant)
        tokens, logits = [], []
        for _ in range(steps):
            logits.append(engine.decode().clone().cpu())
            tokens.append(int(engine.counters.ids))
        return tokens, torch.stack(logits)

    base_tokens, base_logits = run(None)
    differing, worst = 0, 0.0
    for variant in variants.values():
        tokens, logits = run(variant)
        differing += sum(a != b for a, b in zip(base_tokens, tokens))
        worst = max(worst, _finite(common.rel_err(logits, base_logits)))
    return differing / (steps * len(variants)) + worst


def check() -> float:
    """`kernel_error` for every mode and shape, plus `engine_error` at TINY and at TINY with 6 value heads
    (3 a key head): ~0 when right (under the interpreter ~1e-7: fp32 against fp64)."""
    from tritonllm_course.config import TINY
    return (kernel_error() + engine_error(TINY)
            + engine_error(TINY.replace(linear_num_value_heads=6), {"b/a first": {}}))


def sass_check(block_v: int = BLOCK_V) -> dict:
    """The one launch compiled for sm_90 at Qwen3.5-0.8B's shapes (bf16, the PDL config: 4 rows a program, the
    whole row in one tile, 4 warps), (a) and (b), beside the fast level's in-projection alone: registers,
    spills, and the SASS lines of the atomics (ATOMG / REDG), of the fences (MEMBAR.ALL.GPU before a release,
    CCTL.IVALL, the L1 invalidated after an acquire) and of the loads past L1 (LDG ... STRONG.GPU: what
    `ld.global.cg` becomes, and (b)'s polls, `ld.global.gpu.acquire`, Triton's form of an acquire atomic add
    of 0). Runs without a GPU (under the interpreter in a fresh process)."""
    from tritonllm_course.config import QWEN35_0_8B as c
    from tritonllm_course.lowering import lower_many
    H, HV, DK, DV = (c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim,
                     c.linear_value_head_dim)
    K, C = c.hidden_size, 2 * H * DK + HV * DV
    N = C + HV * DV + 2 * HV
    cfg = NF.fused_gemv_config(N, K, False, norm=True, conv=True, pdl=True)
    tile = dict(BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], KC=c.linear_conv_kernel_dim, UNROLL=cfg["UNROLL"],
                PDL=True)
    sig = {"x_ptr": "*bf16", "norm_w_ptr": "*bf16", "w_ptr": "*bf16", "y_ptr": "*bf16", "N": N, "K": K,
           "eps": "fp32", "conv_w_ptr": "*bf16", "conv_state_ptr": "*bf16"}
    fused_sig = {**sig, "A_log_ptr": "*fp32", "dt_bias_ptr": "*bf16", "state_ptr": "*fp32", "o_ptr": "*bf16",
                 "count_ptr": "*i32", "q_scale": "fp32", "qk_eps": "fp32"}
    heads = dict(H=H, HV=HV, DK=DK, DV=DV, BK=DK, BV=block_v, HVB=triton.next_power_of_2(HV))
    requests = [dict(kernel=NF.fused_gemv_kernel, signature={**sig, "up_w_ptr": "*bf16", "C": C},
                     constexprs=dict(HAS_NORM=True, GATED=False, CONV=True, **tile), num_warps=cfg["num_warps"],
                     num_stages=1)]
    requests += [dict(kernel=in_proj_recurrence_kernel, signature=fused_sig,
                      constexprs=dict(**tile, **heads, AB_FIRST=True, TAIL=tail), num_warps=cfg["num_warps"],
                      num_stages=1) for tail in (False, True)]
    found = {}
    for name, low in zip(("in-projection as is", "(a) last-arriver", "(b) tail programs"), lower_many(requests)):
        found[name] = {"resources": low.resources, "instructions": low.instructions(),
                       "atomics": low.lines("sass", r"\b(ATOM|ATOMG|RED|REDG)\b"),
                       "loads_past_l1": low.lines("sass", r"\bLDG\S*STRONG\.GPU"),
                       "ptx_cg_loads": low.count("ptx", r"ld\.global\.cg"),
                       "ptx_atomics": low.lines("ptx", r"\b(atom|red)\."),
                       "fences": low.lines("sass", r"\b(MEMBAR\S*|CCTL\S*)"),
                       "barriers": low.count("sass", r"\bBAR\.SYNC")}
    return found


def main(out):
    common.setup()
    res = common.header(check=check(), sass={bv: sass_check(bv) for bv in (8, 16, BLOCK_V)}, engine={})
    path = common.result_path(out, "deltanet_head_fusion_probe")
    res["tokens_equal_as_is"] = common.engine_variants(res, path, VARIANTS, engine_us, CONTEXTS, REPEATS, "as is")
    print("tokens equal:", res["tokens_equal_as_is"], flush=True)
    common.save(path, res)


if __name__ == "__main__":
    main(common.out_dir())
