"""FlashDecoding (chapter 25): decode attention split along the cache, then an exact merge.

One new token, q [heads, head_dim], over the first `length` rows of the static cache
[max_len, kv_heads, head_dim] (token-first), `length` a 1-element int tensor in device memory.

Chapter 08's fused kernel has one program per KV head: 2 programs for Qwen3.5, 2 of an H200's 132 SMs.
Here the cache is cut into `num_splits` chunks and two kernels run:

1. `flash_decoding_split_kernel`, grid (KV heads, splits): a program attends with the G query heads of
   its KV head (the rows of a 16-row tile, as in chapter 08) over its chunk only, and writes fp32
   partials per (head, split): the max m_i of its scores (log2 units), the sum l_i of exp2(s - m_i),
   and the unnormalised output acc_i = sum exp2(s - m_i) v.
2. `flash_decoding_merge_kernel`, grid (heads, head_dim blocks): with M = max_i m_i and
   w_i = exp2(m_i - M), out = sum_i w_i acc_i / sum_i w_i l_i: exactly the softmax over all the keys.

Graph-safe. `num_splits` is fixed at launch (from max_len and the number of SMs) and the length is read
in device memory by both kernels, so one captured launch serves every length. The chunk adapts to it:
chunk = length / num_splits rounded up, at least one BLOCK_N block, so a short cache uses a few one-block
splits and a long one all of them. Splits that start at or past the length write nothing, and the
merge reads only the cdiv(length, chunk) splits in use: no partial of an empty split is ever read, so
no exp2(-inf - -inf) = NaN can reach the output.
"""
import math

import torch
import triton
import triton.language as tl

from tritonllm_course import validate
from tritonllm_course.runtime import pdl_args, runtime
from tritonllm_course.triton_helpers import online_softmax_update, pdl_enter, pdl_launch_dependents, pdl_wait, sigmoid

LOG2E = math.log2(math.e)
SMS = 132                   # an H200's SMs: the split count when no GPU is there to ask
MAX_SPLITS = 256            # the merge holds every split's partial of a head_dim block in one tile
SMEM_BUDGET = 192 * 1024    # bytes of K and V tiles in flight per program (num_stages deep)
MERGE_BLOCK_D = 64          # head dims per merge program: [splits, 64] fp32 partials in registers


@triton.jit
def _chunk_rows(length, num_splits, BLOCK_N: tl.constexpr):
    """Cache rows per split for this length: cdiv(length, num_splits), but at least one BLOCK_N block
    (short caches use few splits, not many nearly empty ones; a zero length cannot divide by zero)."""
    # BEGIN EXERCISE: cdiv(length, num_splits), at least BLOCK_N
    raise NotImplementedError("exercise flash_decoding.py, _chunk_rows: not implemented yet")
    # END EXERCISE


@triton.jit
def _split_partials(q, k_cache_ptr, v_cache_ptr, g, start, end, KV, D, scale_log2e, BLOCK_H: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """The online softmax of the query rows q [BLOCK_H, BLOCK_D] (in the cache's dtype) over the cache rows
    [start, end) of KV head g, start < end: (m, l, acc) fp32, m in log2 units (the merge's partials)."""
    # BEGIN EXERCISE: m = -inf, l = 0, acc = 0; loop over the rows in BLOCK_N steps: K and V tiles of head g
    #   (rows past end masked), scores in log2 units (-inf past end), online_softmax_update
    raise NotImplementedError("exercise flash_decoding.py, _split_partials: not implemented yet")
    # END EXERCISE


@triton.jit
def flash_decoding_split_kernel(q_ptr, k_cache_ptr, v_cache_ptr, length_ptr, acc_ptr, m_ptr, l_ptr,
                                max_len, num_splits, KV, D, scale_log2e, G: tl.constexpr,
                                BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                                PDL: tl.constexpr = False):
    """Program (g, split): the G query heads of KV head g over cache rows [split * chunk, + chunk) that
    are before the length. Partials of (head, split) at index head * num_splits + split: m, l [H * splits],
    acc [H * splits, D], all fp32. A split with no row before the length writes nothing."""
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    # BEGIN EXERCISE: length from device memory (at most max_len); this split's rows start .. end from _chunk_rows;
    #   only if start < length: load the G query rows (padded to BLOCK_H), _split_partials over start .. end,
    #   store m, l, acc of each head at head * num_splits + split
    raise NotImplementedError("exercise flash_decoding.py, flash_decoding_split_kernel: not implemented yet")
    # END EXERCISE


@triton.jit
def _merge_partials(acc_ptr, m_ptr, l_ptr, head, d, d_ok, used, num_splits, D, BLOCK_S: tl.constexpr):
    """out[head, d] (fp32) from the partials of the first `used` splits (BLOCK_S >= used). The loads go
    to L2 past this SM's L1 (".cg"): in the one-launch kernel other SMs stored them moments before."""
    # BEGIN EXERCISE: load the used splits' m and l (others: -inf and 0, never read); M = max m;
    #   w = exp2(m - M), 0 for unused splits; out = sum w * acc / sum w * l
    raise NotImplementedError("exercise flash_decoding.py, _merge_partials: not implemented yet")
    # END EXERCISE


@triton.jit
def flash_decoding_merge_kernel(acc_ptr, m_ptr, l_ptr, length_ptr, out_ptr, gate_ptr, max_len, num_splits, D,
                                BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
                                HAS_GATE: tl.constexpr, PDL: tl.constexpr = False):
    """Program (head, d block): out[head, d] from the partials of the splits in use (BLOCK_S >= splits).
    HAS_GATE: times sigmoid(gate[head, d]) (Qwen's output gate, fused)."""
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    # BEGIN EXERCISE: this program's head and head_dim block d; the splits in use = cdiv(length, chunk) (same
    #   length and _chunk_rows as the split kernel); out from _merge_partials (the gate and the store follow)
    raise NotImplementedError("exercise flash_decoding.py, flash_decoding_merge_kernel: not implemented yet")
    # END EXERCISE
    if HAS_GATE:    # the output gate before the one rounding: one kernel fewer per attention layer
        out = out * sigmoid(tl.load(gate_ptr + head * D + d, mask=d_ok, other=0.0).to(tl.float32))
    tl.store(out_ptr + head * D + d, out.to(out_ptr.dtype.element_ty), mask=d_ok)


@triton.jit
def _normed_rotated(row_ptr, rows_ok, w, wp, c, s, d, partner, rot, d_ok, half, D, eps):
    """Rows [R, BLOCK_D] at row_ptr [R, 1] (one head each), RMS-normalised with the weight w = 1 + weight
    (wp at the rotation partners) and rotated (rotate-half RoPE on the dims where rot, by c and s), in fp32:
    chapter 22's q/k prologue on a tile of heads."""
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
                                BLOCK_S: tl.constexpr, MERGE_D: tl.constexpr, PDL: tl.constexpr = False):
    """An attention layer's decode step after its projection, in one launch. Program (g, split), as the
    split kernel's: q's G heads of KV head g normalised and rotated (chapter 22's prologue), rounded to the
    cache's dtype as the prologue kernel would store them; the split holding the new row (length - 1) also
    normalises and rotates k, writes it and v into the cache, then reads them back with the rest of its
    rows; its partials stored, it counts itself done in count[g]. The split that counts last merges the
    group's G heads (`_merge_partials`), applies the gate, and sets count[g] back to 0 for the next call.
    Its atomic add (acquire and release, GPU-wide) orders every split's partial stores before its loads.
    The rows and merge order are the split and merge kernels': the same partials, the same bits.
    PDL: the length (advanced by the step before: the engine's step starts with a plainly launched
    kernel), the norms' weights and this position's cos and sin are loaded before the wait."""
    if PDL:
        pdl_launch_dependents()
    g = tl.program_id(0)
    split = tl.program_id(1)
    length = tl.minimum(tl.load(length_ptr), max_len)
    pos = length - 1                                             # the new token's row
    chunk = _chunk_rows(length, num_splits, BLOCK_N)
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
                    tl.store(out_ptr + (g * G + r) * D + dm, (out * sigmoid(gate)).to(out_ptr.dtype.element_ty),
                             mask=dm_ok)
            tl.atomic_xchg(count_ptr + g, 0)


def decoding_config(max_len: int, KV: int, D: int, element_size: int, device: torch.device,
                    interpreted: bool = False) -> dict:
    """Split count and tiles (reasoned for an H200; chapter 25 measures them).

    BLOCK_N = 64 cache rows per step, as chapter 08's decode loop. Splits: one program per SM at most
    (KV x splits <= SMs; 66 splits per KV head on an H200): every program then has its own SM and its
    K/V stream, and a 16,384-token cache gives each split 249 rows, 4 steps of 64. Fewer when the cache has
    fewer blocks. num_stages: as many [64, 256] K and V tiles in flight as SMEM_BUDGET holds (3 in bf16,
    1 in fp32). Under the CPU interpreter 16 rows a step, so small caches still split.
    """
    block_n = 16 if interpreted else 64
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else SMS
    block_d = triton.next_power_of_2(D)
    stages = max(1, min(3, SMEM_BUDGET // (2 * block_n * block_d * element_size)))
    return {"num_splits": max(1, min(triton.cdiv(max_len, block_n), sms // KV)), "BLOCK_N": block_n,
            "num_stages": 1 if interpreted else stages}


def flash_decoding(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, length, scale: float,
                   out: torch.Tensor | None = None, num_splits: int | None = None,
                   partials: torch.Tensor | None = None, gate: torch.Tensor | None = None) -> torch.Tensor:
    """One decode token over the first `length` rows of the static KV cache, split along the cache.

    q:                [heads, head_dim], the new token (its k and v already written to the cache)
    k_cache, v_cache: [max_len, kv_heads, head_dim], same dtype as q
    length:           1-element int tensor in device memory (or an int): cached tokens, the new one
                      included; read by both kernels, so a CUDA graph replays with the current value
    out:              [heads, head_dim] in q's dtype
    num_splits:       programs per KV head (default: `decoding_config`'s), at most MAX_SPLITS
    partials:         fp32 scratch of heads * num_splits * (head_dim + 2) elements (allocated if None):
                      the unnormalised outputs [heads, splits, head_dim], then the maxima and the sums
                      [heads, splits] each
    gate:             optional [heads, head_dim] in q's dtype, contiguous: out = attention * sigmoid(gate),
                      Qwen's output gate, applied by the merge
    """
    validate.tensor(q, "q", dtype=validate.FLOATS, ndim=2)
    H, D = q.shape
    validate.tensor(k_cache, "k_cache", dtype=q.dtype, ndim=3)
    max_len, KV = k_cache.shape[0], k_cache.shape[1]
    validate.tensor(k_cache, "k_cache", shape=(max_len, KV, D))
    validate.tensor(v_cache, "v_cache", dtype=q.dtype, shape=(max_len, KV, D))
    if KV == 0 or H % KV:
        raise ValueError(f"{H} query heads are not a multiple of {KV} KV heads (GQA)")
    device = validate.same_device(q=q, k_cache=k_cache, v_cache=v_cache)
    if isinstance(length, torch.Tensor):
        validate.tensor(length, "length", dtype=validate.INTS, shape=(1,), device=device.type)
    else:
        length = torch.tensor([int(length)], dtype=torch.int32, device=device)
    validate.device_range(length, 1, max_len, "length", f"a decode step attends to 1 .. {max_len} cached tokens")
    cfg = decoding_config(max_len, KV, D, q.element_size(), device, runtime().interpreted)
    splits = cfg["num_splits"] if num_splits is None else num_splits
    if not 1 <= splits <= MAX_SPLITS:
        raise ValueError(f"num_splits must be in [1, {MAX_SPLITS}], got {splits}")
    if partials is None:
        partials = torch.empty(H * splits * (D + 2), dtype=torch.float32, device=device)
    validate.tensor(partials, "partials", dtype=torch.float32, shape=(H * splits * (D + 2),), device=device.type)
    if gate is not None:
        validate.tensor(gate, "gate", dtype=q.dtype, shape=(H, D), device=device.type)
    out = validate.output(out, "out", (H, D), q.dtype, device)
    acc = partials[:H * splits * D]                                  # [H * splits * D]: [H, splits, D]
    m = partials[H * splits * D:H * splits * (D + 1)]                # [H * splits]
    l = partials[H * splits * (D + 1):]                              # [H * splits]
    G, block_d = H // KV, triton.next_power_of_2(D)
    flash_decoding_split_kernel[(KV, splits)](
        q, k_cache, v_cache, length, acc, m, l, max_len, splits, KV, D, scale * LOG2E, G=G,
        BLOCK_H=max(16, triton.next_power_of_2(G)), BLOCK_N=cfg["BLOCK_N"], BLOCK_D=block_d,
        num_warps=4, num_stages=cfg["num_stages"], **pdl_args())
    merge_d = min(MERGE_BLOCK_D, block_d)
    flash_decoding_merge_kernel[(H, triton.cdiv(D, merge_d))](
        acc, m, l, length, out, q if gate is None else gate, max_len, splits, D, BLOCK_N=cfg["BLOCK_N"],
        BLOCK_S=max(2, triton.next_power_of_2(splits)), BLOCK_D=merge_d, HAS_GATE=gate is not None,
        num_warps=4, **pdl_args())
    return out


def flash_decoding_fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor,
                         k_weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
                         v_cache: torch.Tensor, length, scale: float, gate: torch.Tensor, eps: float = 1e-6,
                         out: torch.Tensor | None = None, num_splits: int | None = None,
                         partials: torch.Tensor | None = None, counts: torch.Tensor | None = None) -> torch.Tensor:
    """A decode token's attention after the projection, one launch for three: chapter 22's q/k norm, RoPE
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
    cfg = decoding_config(max_len, KV, D, q.element_size(), device, runtime().interpreted)
    splits = cfg["num_splits"] if num_splits is None else num_splits
    if not 1 <= splits <= MAX_SPLITS:
        raise ValueError(f"num_splits must be in [1, {MAX_SPLITS}], got {splits}")
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
        scale * LOG2E, eps, G=G, BLOCK_H=max(16, triton.next_power_of_2(G)), BLOCK_N=cfg["BLOCK_N"],
        BLOCK_D=block_d, BLOCK_S=max(2, triton.next_power_of_2(splits)), MERGE_D=min(MERGE_BLOCK_D, block_d),
        num_warps=4, num_stages=cfg["num_stages"], **pdl_args())
    return out
