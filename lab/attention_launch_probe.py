"""An attention layer's decode step in one launch rather than three?

    python -m lab.attention_launch_probe [OUTDIR]   (on an sm_90 GPU; writes
                                                     OUTDIR/attention_launch_probe_<gpu>_<date>.json)

Question: under PDL the fast level's attention layer runs three kernels at decode, chapter 22_layer_fusion's q/k norm +
RoPE + cache write, FlashDecoding's split kernel and its merge, whose increments add up to ~10 us a layer
at 128 cached tokens against a 0.08 us floor (0.5 us for the six layers; `pdl_step_profile`, 2026-12-02,
lab/results/pdl_step_profile_nvidia-h200_2026-12-02.json). Can one launch do all three?
`flash_decoding_fused` below: program (KV head, split) as the split kernel's; each split normalises and
rotates its query heads itself, the split holding the new row writes k and v into the cache (then reads
them back, after a CTA barrier), and the last split of each KV head to finish, counted with a GPU-wide
acquire-release atomic, merges the group's partials (`.cg` loads past L1), applies the gate and sets the
count back to 0 for the next replay. The same partials and merge order as the two kernels.
Method: the engine's fast decode step of Qwen3.5-0.8B (random weights of the real shapes, bf16, its CUDA
graph, PDL) at 128 and 4,096 cached tokens, with the three kernels and with the one launch (`one_launch`
swaps it into the engine's decode ops), also at 16-row steps, and in two launches (`merge_kernel=True`: the
prologue in the split kernel, FlashDecoding's merge kernel after it); us per token by CUDA events over 64
replays; the greedy tokens of each against the three kernels'. `check` compares the one launch with the
three kernels at odd shapes, a counts buffer used twice.
Result: NVIDIA H200, 2026-12-02 (lab/results/attention_launch_probe_nvidia-h200_2026-12-02.json), us per
token at 128 / 4,096 cached tokens: the three kernels 628.6 / 657.1, the one launch 702.5 / 794.0, at 16-row
steps 670.9 / 775.6. The same run wired into the engine's fast level as a slot of its own, earlier that day (not
saved), gave 703.2 / 797.5 against 628.1 / 655.3. The one launch loses 12 us a layer at 128 cached tokens and 23 at
4,096. Where it goes (read from the code, not timed apart): the last split merges its group's 4 heads x 4
column blocks one after another, each a [splits, 64] tile summed across warps, where the merge kernel
spreads them over 32 programs; at 4,096 that one program also reads 66 splits' partials (270 KB); the
fused kernel holds 220 registers a thread against the split kernel's. Its greedy tokens differ from the
three kernels' at 128 (on the GPU the per-head norm sums in another order; bit-identical under the
interpreter).
Two launches, re-run the same day (lab/results/attention_launch_probe_nvidia-h200_2026-12-02_two_launches.json):
the three kernels 626.9, 628.7 / 656.2, 654.1, the one launch 700.4, 702.0 / 794.9, 801.7, two launches 618.0,
622.3 / 651.3, 650.5: 7.7 us a token at 128 cached tokens (1.2%), 4 at 4,096, six kernels fewer a token.
Verdict: not adopted: the engine keeps chapter 22_layer_fusion's prologue and solutions/flash_decoding.py's two kernels.
The two launches gain 1%, which does not yet pay for moving chapter 22_layer_fusion's exercise into chapter
25_flash_decoding's split kernel; it is the first candidate when the attention chapters are next rewritten.
What one launch would need first is a merge spread over programs, which is the second kernel again.
"""

import torch
import triton
import triton.language as tl

from lab import common
from lab.flash_decoding_prefetch_probe import _rows_per_split
from tritonllm_course import kernels, validate
from tritonllm_course.runtime import pdl_args, runtime
from tritonllm_course.triton_helpers import pdl_launch_dependents, pdl_wait, sigmoid

online_softmax_update = kernels.load("attention", "solutions").module.online_softmax_update    # chapter 08_attention's

CONTEXTS = (128, 4096)
REPEATS = 2


@triton.jit
def _split_partials(q, k_cache_ptr, v_cache_ptr, g, start, end, KV, D, scale_log2e, BLOCK_H: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """The online softmax of the query rows q [BLOCK_H, BLOCK_D] (in the cache's dtype) over the cache rows
    [start, end) of KV head g, start < end: (m, l, acc) fp32, m in log2 units (the merge's partials)."""
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    m = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_D], dtype=tl.float32)
    for n0 in range(start, end, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        n_ok = n < end
        offs = (n.to(tl.int64) * KV + g)[:, None] * D + d[None, :]                  # [BLOCK_N, BLOCK_D]
        kv_mask = n_ok[:, None] & d_ok[None, :]
        k = tl.load(k_cache_ptr + offs, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale_log2e              # [BLOCK_H, BLOCK_N]
        s = tl.where(n_ok[None, :], s, float("-inf"))   # every block has a row before end: m stays finite
        v = tl.load(v_cache_ptr + offs, mask=kv_mask, other=0.0)
        m, l, acc = online_softmax_update(m, l, acc, s, v)
    return m, l, acc


@triton.jit
def _merge_partials(acc_ptr, m_ptr, l_ptr, head, d, d_ok, used, num_splits, D, BLOCK_S: tl.constexpr):
    """out[head, d] (fp32) from the partials of the first `used` splits (BLOCK_S >= used). The loads go
    to L2 past this SM's L1 (".cg"): in the one-launch kernel other SMs stored them moments before."""
    s = tl.arange(0, BLOCK_S)
    s_ok = s < used
    part = head * num_splits + s                                                        # [BLOCK_S]
    m = tl.load(m_ptr + part, mask=s_ok, other=float("-inf"), cache_modifier=".cg")
    l = tl.load(l_ptr + part, mask=s_ok, other=0.0, cache_modifier=".cg")
    w = tl.where(s_ok, tl.exp2(m - tl.max(m, axis=0)), 0.0)     # split 0 is always in use: the max is finite
    acc = tl.load(acc_ptr + part.to(tl.int64)[:, None] * D + d[None, :], mask=s_ok[:, None] & d_ok[None, :],
                  other=0.0, cache_modifier=".cg")                                      # [BLOCK_S, BLOCK_D]
    out = tl.sum(w[:, None] * acc, axis=0) / tl.sum(w * l, axis=0)
    return out


@triton.jit
def _normed_rotated(row_ptr, rows_ok, w, wp, c, s, d, partner, rot, d_ok, half, D, eps):
    """Rows [R, BLOCK_D] at row_ptr [R, 1] (one head each), RMS-normalised with the weight w = 1 + weight
    (wp at the rotation partners) and rotated (rotate-half RoPE on the dims where rot, by c and s), in fp32:
    chapter 22_layer_fusion's q/k prologue on a tile of heads."""
    x = tl.load(row_ptr + d[None, :], mask=rows_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
    xp = tl.load(row_ptr + partner[None, :], mask=rows_ok[:, None] & rot[None, :], other=0.0).to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=1) / D + eps)[:, None]                        # per head: [R, 1]
    n = x * inv_rms * w[None, :]
    n_p = xp * inv_rms * wp[None, :]
    return tl.where(rot[None, :], n * c[None, :] + tl.where((d < half)[None, :], -n_p, n_p) * s[None, :], n)


@triton.jit
def flash_decoding_fused_kernel(q_ptr, k_ptr, v_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, k_cache_ptr, v_cache_ptr,
                                length_ptr, gate_ptr, out_ptr, acc_ptr, m_ptr, l_ptr, count_ptr, sq, sk, sv,
                                max_len, num_positions, num_splits, KV, D, half, scale_log2e, eps, G: tl.constexpr,
                                BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                                BLOCK_S: tl.constexpr, MERGE_D: tl.constexpr, MERGE: tl.constexpr = True,
                                PDL: tl.constexpr = False):
    """An attention layer's decode step after its projection, in one launch. Program (g, split), as the
    split kernel's: q's G heads of KV head g normalised and rotated (chapter 22_layer_fusion's prologue), rounded to the
    cache's dtype as the prologue kernel would store them; the split holding the new row (length - 1) also
    normalises and rotates k, writes it and v into the cache, then reads them back with the rest of its
    rows; its partials stored, it counts itself done in count[g]. The split that counts last merges the
    group's G heads (`_merge_partials`), applies the gate, and sets count[g] back to 0 for the next call.
    Its atomic add (acquire and release, GPU-wide) orders every split's partial stores before its loads.
    The rows and merge order are the split and merge kernels': the same partials, the same bits.
    PDL: the length (advanced by the step before: the engine's step starts with a plainly launched
    kernel), the norms' weights and this position's cos and sin are loaded before the wait.
    MERGE=False: the partials stored, nothing counted or merged (FlashDecoding's merge kernel follows)."""
    if PDL:
        pdl_launch_dependents()
    g = tl.program_id(0)
    split = tl.program_id(1)
    length = tl.minimum(tl.load(length_ptr), max_len)
    pos = length - 1                                             # the new token's row
    chunk = _rows_per_split(length, num_splits, BLOCK_N)
    start = split * chunk
    end = tl.minimum(length, start + chunk)
    h = tl.arange(0, BLOCK_H)
    d = tl.arange(0, BLOCK_D)
    h_ok, d_ok = h < G, d < D
    rot = d < 2 * half                                           # the rotary dims
    partner = tl.where(d < half, d + half, d - half)             # rotate-half: (i, i + half) pairs
    qw = 1.0 + tl.load(qw_ptr + d, mask=d_ok, other=0.0).to(tl.float32)
    qwp = 1.0 + tl.load(qw_ptr + partner, mask=rot, other=0.0).to(tl.float32)
    kw = 1.0 + tl.load(kw_ptr + d, mask=d_ok, other=0.0).to(tl.float32)
    kwp = 1.0 + tl.load(kw_ptr + partner, mask=rot, other=0.0).to(tl.float32)
    in_table = rot & (pos >= 0) & (pos < num_positions)          # a position past the tables rotates to NaN
    c = tl.load(cos_ptr + pos * 2 * half + d, mask=in_table, other=float("nan")).to(tl.float32)
    s = tl.load(sin_ptr + pos * 2 * half + d, mask=in_table, other=float("nan")).to(tl.float32)
    if PDL:
        pdl_wait()              # from here on q, k, v and the gate are the projection's stores
    if start < length:
        dtype = k_cache_ptr.dtype.element_ty
        q = _normed_rotated(q_ptr + (g * G + h)[:, None] * sq, h_ok, qw, qwp, c, s, d, partner, rot, d_ok, half,
                            D, eps).to(dtype)                                           # [BLOCK_H, BLOCK_D]
        if (start <= pos) & (pos < end):    # this split holds the new row: k and v go into the cache first
            first = h == 0                                       # k as a tile of one row
            k_new = _normed_rotated(k_ptr + g * sk + 0 * h[:, None], first, kw, kwp, c, s, d, partner, rot, d_ok,
                                    half, D, eps)
            row = (pos.to(tl.int64) * KV + g) * D + 0 * h[:, None] + d[None, :]          # [BLOCK_H, BLOCK_D]
            new_ok = first[:, None] & d_ok[None, :]
            tl.store(k_cache_ptr + row, k_new.to(dtype), mask=new_ok)
            v_new = tl.load(v_ptr + g * sv + 0 * h[:, None] + d[None, :], mask=new_ok)
            tl.store(v_cache_ptr + row, v_new, mask=new_ok)
            tl.debug_barrier()  # the program's threads read the row back below: after every store of it
        m, l, acc = _split_partials(q, k_cache_ptr, v_cache_ptr, g,
                                    start, end, KV, D, scale_log2e, BLOCK_H, BLOCK_N, BLOCK_D)
        part = num_splits * (g * G + h) + split                                         # [BLOCK_H]
        tl.store(m_ptr + part, m, mask=h_ok)
        tl.store(l_ptr + part, l, mask=h_ok)
        tl.store(acc_ptr + part.to(tl.int64)[:, None] * D + d[None, :], acc, mask=h_ok[:, None] & d_ok[None, :])
        if MERGE:
            tl.debug_barrier()      # every thread's partial stores before the count
            done = tl.atomic_add(count_ptr + g, 1, sem="acq_rel", scope="gpu")
            used = tl.cdiv(length, chunk)
            if done == used - 1:    # the last split of group g to finish: every partial of the group is stored
                for r in tl.static_range(G):
                    for d0 in tl.static_range(0, BLOCK_D, MERGE_D):
                        dm = d0 + tl.arange(0, MERGE_D)
                        dm_ok = dm < D
                        out = _merge_partials(acc_ptr, m_ptr, l_ptr, g * G + r, dm, dm_ok, used, num_splits, D,
                                              BLOCK_S)
                        gate = tl.load(gate_ptr + (g * G + r) * D + dm, mask=dm_ok, other=0.0).to(tl.float32)
                        tl.store(out_ptr + (g * G + r) * D + dm,
                                 (out * sigmoid(gate)).to(out_ptr.dtype.element_ty), mask=dm_ok)
                tl.atomic_xchg(count_ptr + g, 0)


def flash_decoding_fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor,
                         k_weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
                         v_cache: torch.Tensor, length, scale: float, gate: torch.Tensor, eps: float = 1e-6,
                         out: torch.Tensor | None = None, num_splits: int | None = None,
                         partials: torch.Tensor | None = None, counts: torch.Tensor | None = None,
                         merge_kernel: bool = False) -> torch.Tensor:
    """A decode token's attention after the projection, one launch for three: chapter 22_layer_fusion's q/k norm, RoPE
    and cache write, the split attention, and the merge with the output gate (by the last split of each
    KV head to finish, counted with an atomic).

    q:                [heads, head_dim], k, v: [kv_heads, head_dim], the projection's rows (each head
                      contiguous, heads strided); q_weight, k_weight: [head_dim], the norms' offsets from 1
    cos, sin:         [positions, rotary_dim] tables (`reference.rope_cache`)
    k_cache, v_cache: [max_len, kv_heads, head_dim] in q's dtype; row length - 1 is written here
    length:           1-element int tensor in device memory (or an int): cached tokens with the new one,
                      whose position is length - 1
    gate:             [heads, head_dim]: out = attention * sigmoid(gate)
    num_splits, partials: as `flash_decoding`
    counts:           int32 [kv_heads] of zeros, the splits done per KV head; the kernel leaves them 0
                      (allocated if None; the engine keeps one, so that a CUDA graph launches no fill)
    merge_kernel:     two launches: the splits store their partials and FlashDecoding's merge kernel merges
                      them (no counts)
    returns out [heads, head_dim]: the bits of `qk_norm_rope_cache` then `flash_decoding(gate=...)`.
    """
    for x, name in ((q, "q"), (k, "k"), (v, "v")):
        validate.tensor(x, name, dtype=validate.FLOATS, ndim=2, contiguous=False)
        if x.stride(1) != 1:
            raise ValueError(f"{name} must be contiguous within each head (stride 1 on the last dim), got "
                             f"strides {x.stride()}")
    H, D = q.shape
    validate.tensor(k_cache, "k_cache", dtype=q.dtype, ndim=3)
    max_len, KV = k_cache.shape[0], k_cache.shape[1]
    validate.tensor(k_cache, "k_cache", shape=(max_len, KV, D))
    validate.tensor(v_cache, "v_cache", dtype=q.dtype, shape=(max_len, KV, D))
    validate.tensor(k, "k", dtype=q.dtype, shape=(KV, D), contiguous=False)
    validate.tensor(v, "v", dtype=q.dtype, shape=(KV, D), contiguous=False)
    if KV == 0 or H % KV:
        raise ValueError(f"{H} query heads are not a multiple of {KV} KV heads (GQA)")
    validate.tensor(q_weight, "q_weight", dtype=validate.FLOATS, shape=(D,))
    validate.tensor(k_weight, "k_weight", dtype=q_weight.dtype, shape=(D,))
    validate.tensor(cos, "cos", dtype=validate.FLOATS, ndim=2)
    validate.tensor(sin, "sin", dtype=cos.dtype, shape=tuple(cos.shape))
    num_positions, rotary_dim = cos.shape
    if rotary_dim % 2 or not 0 < rotary_dim <= D:
        raise ValueError(f"cos/sin have rotary_dim {rotary_dim}; it must be even and in [2, head_dim = {D}]")
    validate.tensor(gate, "gate", dtype=q.dtype, shape=(H, D))
    if not eps > 0:
        raise ValueError(f"eps must be positive, got {eps}")
    device = validate.same_device(q=q, k=k, v=v, q_weight=q_weight, k_weight=k_weight, cos=cos, sin=sin,
                                  k_cache=k_cache, v_cache=v_cache, gate=gate)
    if isinstance(length, torch.Tensor):
        validate.tensor(length, "length", dtype=validate.INTS, shape=(1,), device=device.type)
    else:
        length = torch.tensor([int(length)], dtype=torch.int32, device=device)
    validate.device_range(length, 1, min(max_len, num_positions), "length",
                          f"the new token's row length - 1 must be in the cache ({max_len} rows) and in the "
                          f"cos/sin tables ({num_positions} positions)")
    fd = kernels.load("flash_decoding", "solutions").module
    cfg = fd.decoding_config(max_len, KV, D, q.element_size(), device, runtime().interpreted)
    splits = cfg["num_splits"] if num_splits is None else num_splits
    if not 1 <= splits <= fd.MAX_SPLITS:
        raise ValueError(f"num_splits must be in [1, {fd.MAX_SPLITS}], got {splits}")
    if partials is None:
        partials = torch.empty(H * splits * (D + 2), dtype=torch.float32, device=device)
    validate.tensor(partials, "partials", dtype=torch.float32, shape=(H * splits * (D + 2),), device=device.type)
    if counts is None:
        counts = torch.zeros(KV, dtype=torch.int32, device=device)
    validate.tensor(counts, "counts", dtype=torch.int32, shape=(KV,), device=device.type)
    out = validate.output(out, "out", (H, D), q.dtype, device)
    acc = partials[:H * splits * D]                                  # [H * splits * D]: [H, splits, D]
    m = partials[H * splits * D:H * splits * (D + 1)]                # [H * splits]
    l = partials[H * splits * (D + 1):]                              # [H * splits]
    G, block_d = H // KV, triton.next_power_of_2(D)
    flash_decoding_fused_kernel[(KV, splits)](
        q, k, v, q_weight, k_weight, cos, sin, k_cache, v_cache, length, gate, out, acc, m, l, counts,
        q.stride(0), k.stride(0), v.stride(0), max_len, num_positions, splits, KV, D, rotary_dim // 2,
        scale * fd.LOG2E, eps, G=G, BLOCK_H=max(16, triton.next_power_of_2(G)), BLOCK_N=cfg["BLOCK_N"],
        BLOCK_D=block_d, BLOCK_S=max(2, triton.next_power_of_2(splits)), MERGE_D=min(fd.MERGE_BLOCK_D, block_d),
        MERGE=not merge_kernel, num_warps=4, num_stages=cfg["num_stages"], **pdl_args())
    if merge_kernel:
        merge_d = min(fd.MERGE_BLOCK_D, block_d)
        fd.flash_decoding_merge_kernel[(H, triton.cdiv(D, merge_d))](
            acc, m, l, length, out, gate, max_len, splits, D, BLOCK_N=cfg["BLOCK_N"],
            BLOCK_S=max(2, triton.next_power_of_2(splits)), BLOCK_D=merge_d, HAS_GATE=True, num_warps=4,
            **pdl_args())
    return out


def one_launch(engine, block_n: int | None = None, merge_kernel: bool = False) -> None:
    """The engine's decode attention swapped for `flash_decoding_fused`: its q/k prologue call keeps its
    arguments (no kernel), its attention call runs the one launch on them. block_n: cache rows a step;
    merge_kernel: the prologue in the split kernel, the merge a kernel of its own (two launches)."""
    stash, counts = {}, torch.zeros(engine.config.num_key_value_heads, dtype=torch.int32, device=engine.device)
    fd = kernels.load("flash_decoding", "solutions").module

    def prologue(**kw):
        stash.update(kw)

    def attention(q, k_cache, v_cache, length, scale, out, gate):
        s = stash
        saved = fd.decoding_config
        if block_n is not None:
            def config(max_len, KV, D, element_size, device, interpreted=False):
                cfg = saved(max_len, KV, D, element_size, device, interpreted)
                stages = max(1, min(3, fd.SMEM_BUDGET // (2 * block_n * triton.next_power_of_2(D) * element_size)))
                return {**cfg, "BLOCK_N": block_n, "num_stages": stages,
                        "num_splits": max(1, min(triton.cdiv(max_len, block_n), cfg["num_splits"]))}
            fd.decoding_config = config
        try:
            flash_decoding_fused(s["q"][0], s["k"][0], s["v"][0], s["q_weight"], s["k_weight"], s["cos"], s["sin"],
                                 k_cache, v_cache, length, scale, gate, eps=s["eps"], out=out, counts=counts,
                                 merge_kernel=merge_kernel)
        finally:
            fd.decoding_config = saved

    engine.ops.decode.qk_prologue, engine.ops.decode.attention = prologue, attention


VARIANTS = {"three kernels": None, "one launch": {}, "one launch, 16-row steps": {"block_n": 16},
            "two launches (prologue in the splits)": {"merge_kernel": True}}


def engine_us(variant, context: int, tokens: int = 64) -> dict:
    setup = None if variant is None else (lambda engine: one_launch(engine, **variant))
    return common.fast_decode_us(context, tokens, setup=setup)


def check() -> float:
    """The one launch against chapter 22_layer_fusion's prologue kernel and the split and merge kernels, at odd shapes
    (GQA 3:1, head_dim 24, partial rotary, 3 splits with the new row in the last, one of length 1), the
    same counts buffer twice: the largest relative error (under the interpreter the same bits)."""
    from tritonllm_course.reference.rope import rope_cache
    fd = kernels.load("flash_decoding", "solutions").module
    lf = kernels.load("layer_fusion", "solutions").module
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator().manual_seed(0)
    worst = 0.0
    for H, KV, D, R, L, n, splits in ((6, 2, 24, 8, 131, 130, 3), (4, 2, 32, 32, 40, 1, 5)):
        rnd = lambda *s: torch.randn(*s, generator=gen).to(device)   # noqa: E731
        q, k, v, gate = rnd(H, 2 * D)[:, :D], rnd(KV, D), rnd(KV, D), rnd(H, D)
        qw, kw = 0.1 * rnd(D), 0.1 * rnd(D)
        cos, sin = rope_cache(L, R, device=device)
        kc, vc = rnd(L, KV, D), rnd(L, KV, D)
        length = torch.tensor([n], dtype=torch.int32, device=device)
        kc2, vc2 = kc.clone(), vc.clone()
        q_rot = lf.qk_norm_rope_cache(q[None], k[None], v[None], qw, kw, cos, sin, length - 1, kc2, vc2)
        want = fd.flash_decoding(q_rot[0], kc2, vc2, length, D ** -0.5, gate=gate, num_splits=splits)
        counts = torch.zeros(KV, dtype=torch.int32, device=device)
        for merge_kernel in (False, False, True):
            out = flash_decoding_fused(q, k, v, qw, kw, cos, sin, kc, vc, length, D ** -0.5, gate,
                                       num_splits=splits, counts=counts, merge_kernel=merge_kernel)
            worst = max(worst, common.rel_err(out.cpu(), want.cpu()), common.rel_err(kc.cpu(), kc2.cpu()),
                        float(counts.any()))
    return worst


def main(out):
    common.setup()
    res = common.header(check_rel_err=check(), engine={})
    path = common.result_path(out, "attention_launch_probe")
    equal = common.engine_variants(res, path, VARIANTS, engine_us, CONTEXTS, REPEATS, "three kernels")
    res["tokens_equal_three_kernels"] = equal
    print("tokens equal:", res["tokens_equal_three_kernels"], flush=True)
    common.save(path, res)


if __name__ == "__main__":
    main(common.out_dir())
