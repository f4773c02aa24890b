"""Gated full attention of Qwen3.5 (chapter 08_attention): the pipeline op by op, then fused.

Shapes (batch 1, tokens first): q [T, heads, head_dim] = [T, 8, 256]; k, v [S, kv_heads, head_dim] =
[S, 2, 256]; scores and probabilities [heads, T, S]; the static cache [max_len, 2, 256].

GQA as rows. Query head h reads KV head g = h // G (G = heads / kv_heads = 4). Every kernel here that
multiplies with `tl.dot` (the scores, P.V and the fused kernels) gives one program one KV head and stacks
the G query heads that share it as the rows of its tiles: row r = t * G + j is token t, query head
g * G + j. A K or V tile loaded once then serves all G heads through one `tl.dot`, and a decode token
(T = 1) still has G = 4 rows (padded to the 16 that `tl.dot` needs) instead of 1.

Numerics: `tl.dot` takes the operands in their input dtype (bf16/fp16 on the tensor cores; "ieee"
keeps fp32 inputs in full fp32) and accumulates in fp32. Everything elementwise (scaling, softmax,
the gate) is fp32 after the load; the softmax uses exp2 with the scale folded into log2(e).

- op 5  `qk_scores`       raw q . k^T                         [heads, T, S]
- op 20 `causal_mask`     key s visible to token t iff s <= pos[t]
- op 21 `scaled_softmax`  softmax(scores / 16), fp32
- op 6  `masked_softmax`  the same with masked keys at probability 0 (one kernel, HAS_MASK)
- op 7  `pv`              P . V                               [T, heads, head_dim]
- `decode_attention`      one token over the cache, length in device memory: K/V read once
- `attention`             causal prefill (two passes over the keys: statistics, then P . V)
- `output_gate`           o * sigmoid(gate) before o_proj      [T, heads * head_dim]
"""
import math

import torch
import triton
import triton.language as tl

from tritonllm_course import triton_helpers as helpers, validate
from tritonllm_course.runtime import pdl_args
from tritonllm_course.triton_helpers import pdl_enter, sigmoid

LOG2E = math.log2(math.e)
SOFTMAX_BLOCK = 2048     # keys per step of the softmax loop: 8 fp32 per thread at 8 warps
GATE_BLOCK = 1024        # elements per program of the output gate
# chosen by timing BLOCK_N x warps x stages on an H200 in bf16 (timings not saved): 64 cached rows a step, 3 deep,
# is the fastest decode loop (2 x 2 x 32 KB of K/V tiles in shared memory: the pipeliner holds num_stages - 1
# of them) at 128 to 4,096 tokens; the prefill kernel is fastest with small row blocks (64 programs at
# T = 128), 64 keys a step
DECODE_BLOCK_N = 64
DECODE_STAGES = 3
PREFILL_BLOCK_M = 16
PREFILL_BLOCK_N = 64
PREFILL_STAGES = 2


# --- op 5: scores ---------------------------------------------------------------------------------
@triton.jit
def qk_scores_kernel(q_ptr, k_ptr, out_ptr, T, S, H, KV, D,
                     G: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """out[h, t, s] = q[t, h] . k[s, h // G] for one KV head (axis 0), BLOCK_M rows, BLOCK_N keys."""
    # BEGIN EXERCISE: rows r -> token r // G and head g*G + r % G; loop over head_dim in BLOCK_D pieces:
    #   q tile [BM, BD], K^T tile [BD, BN], tl.dot into fp32; store to out[head, t, s]
    raise NotImplementedError("exercise attention.py, qk_scores_kernel: not implemented yet")
    # END EXERCISE


# --- op 20: the causal mask -----------------------------------------------------------------------
@triton.jit
def causal_mask_kernel(pos_ptr, out_ptr, T, S, BLOCK_T: tl.constexpr, BLOCK_S: tl.constexpr):
    """out[t, s] = s <= pos[t] for a [BLOCK_T, BLOCK_S] tile."""
    # BEGIN EXERCISE: this tile's token rows and key columns; load pos of the rows;
    #   store (s <= pos) where t < T and s < S
    raise NotImplementedError("exercise attention.py, causal_mask_kernel: not implemented yet")
    # END EXERCISE


# --- ops 21 and 6: scaled (masked) softmax --------------------------------------------------------
@triton.jit
def softmax_kernel(x_ptr, mask_ptr, out_ptr, S, T, scale_log2e,
                   HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    """One row of S scores per program: softmax(x * scale), masked keys -> 0 when HAS_MASK.

    Row `row` of the [rows, S] scores uses mask row `row % T` (the mask is [T, S], shared by heads).
    """
    # BEGIN EXERCISE: pass 1 over the row in BLOCK pieces: per-lane running max m (from -1e30, not -inf) and sum l
    #   of exp2(x*scale_log2e - m) (masked keys = -inf); combine the lanes into the row's M and L;
    #   pass 2: store exp2(x*scale_log2e - M) / L (0 for masked keys)
    raise NotImplementedError("exercise attention.py, softmax_kernel: not implemented yet")
    # END EXERCISE


# --- op 7: P . V ----------------------------------------------------------------------------------
@triton.jit
def pv_kernel(p_ptr, v_ptr, out_ptr, T, S, H, KV, D,
              G: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """out[t, h, d] = sum_s p[h, t, s] v[s, h // G, d]: one KV head (axis 0), BLOCK_M rows, BLOCK_D dims."""
    # BEGIN EXERCISE: rows as in qk_scores; loop over keys in BLOCK_N pieces:
    #   P tile [BM, BN] from p[head, t, :], V tile [BN, BD] from v[:, g, :], tl.dot into fp32; store to out[t, head, d]
    raise NotImplementedError("exercise attention.py, pv_kernel: not implemented yet")
    # END EXERCISE


# --- fused decode attention -----------------------------------------------------------------------
@triton.jit
def online_softmax_update(m, l, acc, s, v):
    """Fold one block of keys into each row's running softmax (the online softmax of FlashAttention).

    m [M]: running max of the row's scores, in log2 units (-inf before the first block)
    l [M]: running sum of exp2(score - m); acc [M, D]: running sum of exp2(score - m) * v, unnormalised
    s [M, N]: this block's scores in log2 units (scale * log2(e) folded in), -inf where masked; every
              row needs a finite score in the first block it sees, or exp2(-inf - -inf) is NaN
    v [N, D]: the block's values, in their own dtype (bf16/fp16 go to the tensor cores)
    Returns the new (m, l, acc). When a block raises the max from m to m', everything summed so far was
    relative to m: alpha = exp2(m - m') rescales l and acc to m' (alpha = 0 on the first block).
    Written here, used by the decode kernel below and by chapters 23_flash_attention and 25_flash_decoding's flash
    kernels.
    """
    # BEGIN EXERCISE: the new max m'; alpha = exp2(m - m'); p = exp2(s - m'); l and acc rescaled by alpha,
    #   plus this block's sum of p and P . V (tl.dot of p in v's dtype)
    raise NotImplementedError("exercise attention.py, online_softmax_update: not implemented yet")
    # END EXERCISE


@triton.jit
def decode_attention_kernel(q_ptr, k_cache_ptr, v_cache_ptr, length_ptr, out_ptr, max_len, KV, D,
                            scale_log2e, G: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
                            BLOCK_D: tl.constexpr):
    """One new token, one KV head per program: its G query heads over cache rows 0 .. length-1.

    q [heads, D]; caches [max_len, KV, D]; length: 1 int in device memory; out [heads, D].
    Online softmax: running max m and sum l per head; acc is rescaled when m grows.
    """
    # BEGIN EXERCISE: load the G query rows (padded to BLOCK_H); length from device memory (at most max_len);
    #   loop over the cache in BLOCK_N rows: scores = q . K^T * scale_log2e (-inf past length) and the V tile
    #   folded into (m, l, acc) by online_softmax_update; store acc / l
    raise NotImplementedError("exercise attention.py, decode_attention_kernel: not implemented yet")
    # END EXERCISE


# --- causal prefill attention ---------------------------------------------------------------------
@triton.jit
def _masked_scores(q, k_head_ptr, row_stride, pos, n0, S, d, d_ok, scale_log2e, BLOCK_N: tl.constexpr):
    """Scores (log2 units) of a row block q [BLOCK_M, BLOCK_D] against keys n0 .. n0+BLOCK_N-1 of one
    KV head (k_head_ptr points at k[0, g], rows row_stride apart), -inf where key n > pos of the row."""
    # BEGIN EXERCISE: load the K rows (masked past S), q . K^T * scale_log2e,
    #   -inf where the key is after the row's position or past S
    raise NotImplementedError("exercise attention.py, _masked_scores: not implemented yet")
    # END EXERCISE


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, pos_ptr, out_ptr, T, S, H, KV, D, scale_log2e,
                     G: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                     PDL: tl.constexpr = False):
    """Causal attention of BLOCK_M (token, head) rows of one KV head over keys 0 .. S-1.

    Pass 1 finds each row's max and sum of exp2 over its visible keys; pass 2 adds up the normalised
    P . V. Keys past the block's newest position are visible to none of its rows and are skipped.
    """
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    # BEGIN EXERCISE: rows as in qk_scores; q tile [BM, BD]; pos of each row; n_end = newest position + 1;
    #   pass 1: running max m / sum l over key blocks (masked s <= pos); pass 2: p = exp2(s - m) / l, acc += P . V;
    #   store to out[t, head]
    raise NotImplementedError("exercise attention.py, attention_kernel: not implemented yet")
    # END EXERCISE


# --- the output gate ------------------------------------------------------------------------------
@triton.jit
def output_gate_kernel(o_ptr, gate_ptr, out_ptr, n, row, s_gate, BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    """out = o * sigmoid(gate), elementwise over n elements, fp32 inside. o and out are packed; gate has
    `row` elements per token, contiguous, token t's starting at t * s_gate."""
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    # BEGIN EXERCISE: this program's block of offsets; load o, and gate at (offs // row) * s_gate + offs % row, as fp32;
    #   store o * sigmoid(gate)
    raise NotImplementedError("exercise attention.py, output_gate_kernel: not implemented yet")
    # END EXERCISE


# --- host wrappers --------------------------------------------------------------------------------
def _heads(q_heads: int, kv_heads: int) -> int:
    if kv_heads == 0 or q_heads % kv_heads:
        raise ValueError(f"{q_heads} query heads are not a multiple of {kv_heads} KV heads (GQA)")
    return q_heads // kv_heads


def _row_block(rows: int, most: int) -> int:
    """A power-of-two tile height for `rows` rows: at least 16 (tl.dot's minimum), at most `most`."""
    return max(16, min(most, triton.next_power_of_2(rows)))


def qk_scores(q: torch.Tensor, k: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Operator 5: raw scores q . k for every (head, query, key), unscaled, with GQA.

    q: [T, heads, head_dim]; k: [S, kv_heads, head_dim], same dtype (decode: T = 1, k = the cache rows)
    out: [heads, T, S] in q's dtype.
    """
    validate.tensor(q, "q", dtype=validate.FLOATS, ndim=3)
    T, H, D = q.shape
    validate.tensor(k, "k", dtype=q.dtype, ndim=3)
    S, KV = k.shape[0], k.shape[1]
    validate.tensor(k, "k", shape=(S, KV, D))
    G = _heads(H, KV)
    device = validate.same_device(q=q, k=k)
    out = validate.output(out, "out", (H, T, S), q.dtype, device)
    validate.disjoint({"out": out}, {"q": q, "k": k})
    if out.numel():
        bm, bn, bd = _row_block(T * G, 64), 64, min(64, max(16, triton.next_power_of_2(D)))
        grid = (KV, triton.cdiv(T * G, bm), triton.cdiv(S, bn))
        qk_scores_kernel[grid](q, k, out, T, S, H, KV, D, G=G, BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=bd,
                               num_warps=4)
    return out


def causal_mask(pos: torch.Tensor, kv_len: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Operator 20: which keys each query may see, True where key s <= pos[t].

    pos: [T] int positions; kv_len: number of keys. out: [T, kv_len] bool (or int8/uint8 0/1).
    """
    validate.tensor(pos, "pos", dtype=validate.INTS, ndim=1)
    T = pos.shape[0]
    kv_len = validate.check_count(kv_len, "kv_len")      # None or "3" failed in a comparison, 1.5 in the shape
    device = validate.same_device(pos=pos)
    if out is None:
        out = torch.empty((T, kv_len), dtype=torch.bool, device=device)
    validate.tensor(out, "out", dtype=(torch.bool, torch.int8, torch.uint8), shape=(T, kv_len),
                    device=device.type)
    validate.disjoint({"out": out}, {"pos": pos})
    if out.numel():
        grid = (triton.cdiv(T, 16), triton.cdiv(kv_len, 128))
        causal_mask_kernel[grid](pos, out, T, kv_len, BLOCK_T=16, BLOCK_S=128, num_warps=4)
    return out


def _softmax(scores, mask, scale, out):
    validate.finite(scale, "scale")
    S = scores.shape[-1]
    device = validate.same_device(scores=scores, mask=mask)
    out = validate.output(out, "out", tuple(scores.shape), scores.dtype, device)
    validate.disjoint({"out": out}, {"scores": scores, "mask": mask}, same=("scores",))
    rows = scores.numel() // max(S, 1)
    if rows and S:
        T = mask.shape[0] if mask is not None else 1
        block = min(SOFTMAX_BLOCK, max(16, triton.next_power_of_2(S)))
        softmax_kernel[(rows,)](scores, scores if mask is None else mask, out, S, T, scale * LOG2E,
                                HAS_MASK=mask is not None, BLOCK=block, num_warps=4 if block <= 1024 else 8)
    return out


def scaled_softmax(scores: torch.Tensor, scale: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Operator 21: softmax(scores * scale) over the last dim, in fp32 (scale = 1/sqrt(256) = 1/16).

    scores: [..., S] float; out: the same shape and dtype.
    """
    validate.tensor(scores, "scores", dtype=validate.FLOATS)
    if scores.dim() == 0:
        raise ValueError("scores must have at least one dim (the keys)")
    return _softmax(scores, None, scale, out)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, scale: float,
                   out: torch.Tensor | None = None) -> torch.Tensor:
    """Operator 6: softmax(scores * scale) with keys where mask is False at probability 0, in fp32.

    scores: [heads, T, S] float; mask: [T, S] bool (True = attend), shared by the heads
    out: [heads, T, S] in scores' dtype. A row with no visible key is NaN, as in PyTorch.
    """
    validate.tensor(scores, "scores", dtype=validate.FLOATS, ndim=3)
    validate.tensor(mask, "mask", dtype=(torch.bool, torch.int8, torch.uint8), shape=tuple(scores.shape[1:]))
    return _softmax(scores, mask, scale, out)


def pv(p: torch.Tensor, v: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Operator 7: the attention output P . V, with GQA.

    p: [heads, T, S] probabilities; v: [S, kv_heads, head_dim], same dtype
    out: [T, heads, head_dim] in p's dtype.
    """
    validate.tensor(p, "p", dtype=validate.FLOATS, ndim=3)
    H, T, S = p.shape
    validate.tensor(v, "v", dtype=p.dtype, ndim=3)
    if v.shape[0] != S:
        raise ValueError(f"p has {S} keys but v has {v.shape[0]} rows")
    KV, D = v.shape[1], v.shape[2]
    G = _heads(H, KV)
    device = validate.same_device(p=p, v=v)
    out = validate.output(out, "out", (T, H, D), p.dtype, device)
    validate.disjoint({"out": out}, {"p": p, "v": v})
    if out.numel():
        # decode has a single row block per KV head: narrower head_dim blocks give it more programs
        bm, bn = _row_block(T * G, 64), 64
        bd = min(32 if T * G <= 16 else 64, max(16, triton.next_power_of_2(D)))
        grid = (KV, triton.cdiv(T * G, bm), triton.cdiv(D, bd))
        pv_kernel[grid](p, v, out, T, S, H, KV, D, G=G, BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=bd, num_warps=4)
    return out


def decode_config(element_size: int, head_dim: int = 256, shared_bytes: int | None = None) -> tuple[int, int]:
    """(BLOCK_N, num_stages) of the decode loop for K/V elements of `element_size` bytes.

    bf16/fp16: DECODE_BLOCK_N rows, DECODE_STAGES deep. fp32 tiles are twice the bytes: [64, 256] fp32
    K and V tiles 3 stages deep need 276 KB of shared memory (282,688 bytes measured), more than an
    H200's 227 KB, and the launch fails with OutOfResources. Half the rows per step keep the same bytes
    per stage as bf16 and the same number of loads in flight (146 KB in all, 149,568 bytes compiled for
    sm_90; bf16's 64 rows take 138 KB).
    shared_bytes: the GPU's shared memory a block (None: no limit): on the GPUs with less (a T4's 64 KB, an
    RTX card's or an L4's 99 KB) fewer rows per step, as deep (`triton_helpers.rows_within`).
    """
    rows = max(16, DECODE_BLOCK_N * 2 // max(2, element_size))
    row_bytes = 2 * triton.next_power_of_2(head_dim) * element_size          # a K row and a V row
    return helpers.rows_within(shared_bytes, rows, row_bytes, DECODE_STAGES), DECODE_STAGES


def _shared_bytes(device: torch.device) -> int | None:
    """Shared memory a block of the GPU the launch is for (`triton_helpers.gpu_of`); None: the interpreter."""
    gpu = helpers.gpu_of(device)
    return None if gpu is None else gpu.shared_bytes


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, length,
                     scale: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """One decode token attending to the first `length` rows of the static KV cache, fused.

    q:                [heads, head_dim], the new token (its k and v already written to the cache)
    k_cache, v_cache: [max_len, kv_heads, head_dim], same dtype as q
    length:           1-element int tensor in device memory (or an int): cached tokens, the new one
                      included; read by the kernel, so a CUDA graph replays with the current value
    out:              [heads, head_dim] in q's dtype.
    One program per KV head reads its K and V rows once for all of its query heads: 2 programs for
    Qwen3.5. That is far too few for a large GPU; split-KV (FlashDecoding) comes later.
    """
    validate.tensor(q, "q", dtype=validate.FLOATS, ndim=2)
    H, D = q.shape
    validate.tensor(k_cache, "k_cache", dtype=q.dtype, ndim=3)
    max_len, KV = k_cache.shape[0], k_cache.shape[1]
    validate.tensor(k_cache, "k_cache", shape=(max_len, KV, D))
    validate.tensor(v_cache, "v_cache", dtype=q.dtype, shape=(max_len, KV, D))
    G = _heads(H, KV)
    validate.finite(scale, "scale")
    device = validate.same_device(q=q, k_cache=k_cache, v_cache=v_cache)
    length = validate.decode_length(length, max_len, device)
    out = validate.output(out, "out", (H, D), q.dtype, device)
    validate.disjoint({"out": out}, {"q": q, "k_cache": k_cache, "v_cache": v_cache, "length": length})
    block_n, stages = decode_config(q.element_size(), D, _shared_bytes(device))
    decode_attention_kernel[(KV,)](q, k_cache, v_cache, length, out, max_len, KV, D, scale * LOG2E,
                                   G=G, BLOCK_H=max(16, triton.next_power_of_2(G)), BLOCK_N=block_n,
                                   BLOCK_D=triton.next_power_of_2(D), num_warps=4, num_stages=stages)
    return out


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor, scale: float,
              out: torch.Tensor | None = None) -> torch.Tensor:
    """Causal attention (prefill, or any T): q at positions pos over the keys/values 0 .. S-1.

    q: [T, heads, head_dim]; k, v: [S, kv_heads, head_dim], same dtype (the new tokens included)
    pos: [T] int positions, each in [0, S); out: [T, heads, head_dim] in q's dtype.
    """
    T, H, D, S, KV, device = validate.causal_attention(q, k, v, pos)
    validate.finite(scale, "scale")
    G = H // KV
    out = validate.output(out, "out", (T, H, D), q.dtype, device)
    validate.disjoint({"out": out}, {"q": q, "k": k, "v": v, "pos": pos})
    if out.numel():
        bm, bd = _row_block(T * G, PREFILL_BLOCK_M), triton.next_power_of_2(D)
        # keys per step: fewer where the q tile and the K and V tiles would not fit (a T4's 64 KB)
        bn = helpers.rows_within(_shared_bytes(device), PREFILL_BLOCK_N, 2 * bd * q.element_size(),
                                 PREFILL_STAGES, fixed=bm * bd * q.element_size())
        grid = (KV, triton.cdiv(T * G, bm))
        attention_kernel[grid](q, k, v, pos, out, T, S, H, KV, D, scale * LOG2E, G=G, BLOCK_M=bm,
                               BLOCK_N=bn, BLOCK_D=bd, num_warps=4,
                               num_stages=PREFILL_STAGES, **pdl_args())
    return out


def output_gate(o: torch.Tensor, gate: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """o * sigmoid(gate), elementwise, before o_proj (fp32 inside, one rounding).

    o: [T, heads * head_dim] attention output (heads flattened); gate: the same shape, from q_proj:
       each token's row contiguous, tokens at any stride (a column slice of the merged projection)
    out: the same shape, in o's dtype.
    """
    validate.tensor(o, "o", dtype=validate.FLOATS)
    validate.tensor(gate, "gate", dtype=o.dtype, shape=tuple(o.shape), contiguous=o.dim() < 2)
    validate.token_rows(gate, "gate")
    device = validate.same_device(o=o, gate=gate)
    out = validate.output(out, "out", tuple(o.shape), o.dtype, device)
    validate.disjoint({"out": out}, {"o": o, "gate": gate}, same=("o", "gate"))
    n = o.numel()
    if n:
        row = n // o.shape[0] if o.dim() > 1 else n          # elements per token
        s_gate = gate.stride(0) if o.dim() > 1 else n
        output_gate_kernel[(triton.cdiv(n, GATE_BLOCK),)](o, gate, out, n, row, s_gate, BLOCK=GATE_BLOCK,
                                                          num_warps=4, **pdl_args())
    return out
