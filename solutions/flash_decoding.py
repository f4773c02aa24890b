"""FlashDecoding (chapter 25_flash_decoding): decode attention split along the cache, then an exact merge.

One new token, q [heads, head_dim], over the first `length` rows of the static cache
[max_len, kv_heads, head_dim] (token-first), `length` a 1-element int tensor in device memory.

Chapter 08_attention's fused kernel has one program per KV head: 2 programs for Qwen3.5, 2 of an H200's 132 SMs.
Here the cache is cut into `num_splits` chunks and two kernels run:

1. `flash_decoding_split_kernel`, grid (KV heads, splits): a program attends with the G query heads of
   its KV head (the rows of a 16-row tile, as in chapter 08_attention) over its chunk only, and writes fp32
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

from tritonllm_course import kernels, triton_helpers as helpers, validate
from tritonllm_course.runtime import pdl_args, runtime
from tritonllm_course.triton_helpers import pdl_enter, pdl_wait, sigmoid

# chapter 08_attention's online softmax, from the learner's attention.py once written (`kernels.jit_function`)
online_softmax_update = kernels.jit_function("attention", "online_softmax_update", __file__)

LOG2E = math.log2(math.e)
SMS = 132                   # an H200's SMs: the split count when no GPU is there to ask
MAX_SPLITS = 256            # the merge holds every split's partial of a head_dim block in one tile
SMEM_BUDGET = 192 * 1024    # bytes of K and V tiles in flight per program (num_stages deep)
MERGE_BLOCK_D = 64          # head dims per merge program: [splits, 64] fp32 partials in registers


@triton.jit
def _chunk_rows(length, num_splits, BLOCK_N: tl.constexpr):
    """Cache rows per split for this length: cdiv(length, num_splits), but at least one BLOCK_N block
    (short caches use few splits, not many nearly empty ones; a zero length cannot divide by zero)."""
    # BEGIN SOLUTION: cdiv(length, num_splits), at least BLOCK_N
    return tl.maximum(tl.cdiv(length, num_splits), BLOCK_N)
    # END SOLUTION


@triton.jit
def flash_decoding_split_kernel(q_ptr, k_cache_ptr, v_cache_ptr, length_ptr, acc_ptr, m_ptr, l_ptr,
                                max_len, num_splits, KV, D, scale_log2e, G: tl.constexpr,
                                BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                                PDL: tl.constexpr = False):
    """Program (g, split): the G query heads of KV head g over cache rows [split * chunk, + chunk) that
    are before the length. Partials of (head, split) at index head * num_splits + split: m, l [H * splits],
    acc [H * splits, D], all fp32. A split with no row before the length writes nothing."""
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    # BEGIN SOLUTION: length from device memory (at most max_len); this split's rows start .. end from _chunk_rows;
    #   only if start < length: load the G query rows (padded to BLOCK_H), loop over the chunk in BLOCK_N rows
    #   (scores in log2 units, -inf past end, online_softmax_update);
    #   store m, l, acc of each head at head * num_splits + split
    g = tl.program_id(0)
    split = tl.program_id(1)
    length = tl.minimum(tl.load(length_ptr), max_len)
    chunk = _chunk_rows(length, num_splits, BLOCK_N)
    start = split * chunk
    if start < length:
        end = tl.minimum(start + chunk, length)
        h = tl.arange(0, BLOCK_H)
        d = tl.arange(0, BLOCK_D)
        h_ok = h < G
        d_ok = d < D
        q = tl.load(q_ptr + (g * G + h)[:, None] * D + d[None, :], mask=h_ok[:, None] & d_ok[None, :],
                    other=0.0)                                                          # [BLOCK_H, BLOCK_D]
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
        part = (g * G + h) * num_splits + split                                         # [BLOCK_H]
        tl.store(m_ptr + part, m, mask=h_ok)
        tl.store(l_ptr + part, l, mask=h_ok)
        tl.store(acc_ptr + part.to(tl.int64)[:, None] * D + d[None, :], acc, mask=h_ok[:, None] & d_ok[None, :])
    # END SOLUTION


@triton.jit
def flash_decoding_merge_kernel(acc_ptr, m_ptr, l_ptr, length_ptr, out_ptr, gate_ptr, max_len, num_splits, D,
                                BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
                                HAS_GATE: tl.constexpr, PDL: tl.constexpr = False):
    """Program (head, d block): out[head, d] from the partials of the splits in use (BLOCK_S >= splits).
    HAS_GATE: times sigmoid(gate[head, d]) (Qwen's output gate, fused).
    PDL: wait for the split kernel's stores, but let the next kernel (o_proj, which streams its whole weight
    tile in before its own wait) launch only when this one has finished:
    28 us<!-- fig:lab.deltanet_pdl_h100.merge_late.ctx128.gain_us --> a token faster at 128 cached tokens than a
    trigger at entry (lab/deltanet_pdl_probe.py, H100)."""
    if PDL:
        pdl_wait()
    # BEGIN SOLUTION: the splits in use = cdiv(length, chunk) (same length and _chunk_rows as the split kernel);
    #   load their m and l (others: -inf and 0, never read); M = max m; w = exp2(m - M), 0 for unused splits;
    #   out = sum w * acc / sum w * l (the gate and the store follow)
    head = tl.program_id(0)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    d_ok = d < D
    length = tl.minimum(tl.load(length_ptr), max_len)
    used = tl.cdiv(length, _chunk_rows(length, num_splits, BLOCK_N))
    s = tl.arange(0, BLOCK_S)
    s_ok = s < used
    part = head * num_splits + s                                                        # [BLOCK_S]
    m = tl.load(m_ptr + part, mask=s_ok, other=float("-inf"))
    l = tl.load(l_ptr + part, mask=s_ok, other=0.0)
    w = tl.where(s_ok, tl.exp2(m - tl.max(m, axis=0)), 0.0)     # split 0 is always in use: the max is finite
    acc = tl.load(acc_ptr + part.to(tl.int64)[:, None] * D + d[None, :], mask=s_ok[:, None] & d_ok[None, :],
                  other=0.0)                                                            # [BLOCK_S, BLOCK_D]
    out = tl.sum(w[:, None] * acc, axis=0) / tl.sum(w * l, axis=0)
    # END SOLUTION
    if HAS_GATE:    # the output gate before the one rounding: one kernel fewer per attention layer
        out = out * sigmoid(tl.load(gate_ptr + head * D + d, mask=d_ok, other=0.0).to(tl.float32))
    tl.store(out_ptr + head * D + d, out.to(out_ptr.dtype.element_ty), mask=d_ok)


def decoding_config(max_len: int, KV: int, D: int, element_size: int, device: torch.device,
                    interpreted: bool = False) -> dict:
    """Split count and tiles (reasoned for an H200; chapter 25_flash_decoding measures them).

    BLOCK_N = 64 cache rows per step, as chapter 08_attention's decode loop. Splits: one program per SM at most
    (KV x splits <= SMs; 66 splits per KV head on an H200): every program then has its own SM and its
    K/V stream, and a 16,384-token cache gives each split 249 rows, 4 steps of 64. Fewer when the cache has
    fewer blocks. num_stages: as many [64, 256] K and V tiles in flight as SMEM_BUDGET holds (3 in bf16,
    1 in fp32). Under the CPU interpreter 16 rows a step, so small caches still split.
    On a GPU with less shared memory than SMEM_BUDGET (an RTX card's, an L4's, a T4's) the budget is its
    own, and rows per step are halved until two K and V tiles fit (`triton_helpers.rows_within`).
    """
    block_n = 16 if interpreted else 64
    gpu = helpers.gpu_of(device)
    sms, budget = (SMS, SMEM_BUDGET) if gpu is None else (gpu.sms, min(SMEM_BUDGET, gpu.shared_bytes))
    block_d = triton.next_power_of_2(D)
    if budget < SMEM_BUDGET:
        block_n = helpers.rows_within(budget, block_n, 2 * block_d * element_size)
    stages = max(1, min(3, budget // (2 * block_n * block_d * element_size)))
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
    validate.finite(scale, "scale")
    device = validate.same_device(q=q, k_cache=k_cache, v_cache=v_cache)
    length = validate.decode_length(length, max_len, device)
    cfg = decoding_config(max_len, KV, D, q.element_size(), device, runtime().interpreted)
    splits = cfg["num_splits"] if num_splits is None else validate.check_count(num_splits, "num_splits")
    if not 1 <= splits <= MAX_SPLITS:
        raise ValueError(f"num_splits must be in [1, {MAX_SPLITS}], got {splits}")
    if partials is None:
        partials = torch.empty(H * splits * (D + 2), dtype=torch.float32, device=device)
    validate.tensor(partials, "partials", dtype=torch.float32, shape=(H * splits * (D + 2),), device=device.type)
    if gate is not None:
        validate.tensor(gate, "gate", dtype=q.dtype, shape=(H, D), device=device.type)
    out = validate.output(out, "out", (H, D), q.dtype, device)
    validate.disjoint({"out": out, "partials": partials},
                      {"q": q, "k_cache": k_cache, "v_cache": v_cache, "length": length, "gate": gate})
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
