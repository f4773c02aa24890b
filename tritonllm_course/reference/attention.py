"""Gated full attention (6 of the 24 layers): operators 5, 6, 7, 18-21 and the output gate.

Layouts, batch 1, tokens first:
  q [T, heads, head_dim]; k, v [S, kv_heads, head_dim]; scores / probabilities [heads, T, S];
  the static KV cache [max_seq_len, kv_heads, head_dim] per layer, row p = the token at position p.
GQA: query head h reads kv head h // (heads / kv_heads) (4 query heads per kv head in Qwen3.5-0.8B).
The `*_static` versions at the end are the same ops with static shapes, as a CUDA graph captures them.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .precision import acc, expect, shape_str


def _gqa_group(q: torch.Tensor, k: torch.Tensor) -> int:
    expect(q.shape[-1] == k.shape[-1], f"q {shape_str(q)} and k {shape_str(k)} differ in head_dim")
    heads, kv_heads = q.shape[-2], k.shape[-2]
    expect(heads % kv_heads == 0, f"{heads} query heads are not a multiple of {kv_heads} kv heads")
    return heads // kv_heads


def _as_int(n) -> int:
    return int(n.reshape(-1)[0]) if isinstance(n, torch.Tensor) else int(n)


def causal_mask(pos: torch.Tensor, kv_len: int) -> torch.Tensor:
    """Operator 20: which keys each query may attend to.

    pos:    [T] int, absolute position of each query token
    kv_len: number of key positions (the cache rows 0 .. kv_len-1)
    returns [T, kv_len] bool, True where key j <= pos[i] (the token itself and everything before it).
    """
    keys = torch.arange(kv_len, device=pos.device)
    return keys[None, :] <= pos.long()[:, None]                 # [T, kv_len]


def qk_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Operator 5: raw dot products q . k for every (head, query, key), unscaled.

    q: [T, heads, head_dim]; k: [S, kv_heads, head_dim], same dtype
    returns [heads, T, S] in q's dtype.
    """
    k = k.repeat_interleave(_gqa_group(q, k), dim=1)             # [S, heads, head_dim]
    return torch.einsum("thd,shd->hts", q, k)


def scaled_softmax(scores: torch.Tensor, scale: float) -> torch.Tensor:
    """Operator 21: `softmax(scores * scale)` over the last dim, in fp32.

    scores: [..., S] float; scale: 1/sqrt(head_dim) = 1/16 in Qwen3.5
    returns probabilities in scores' dtype.
    """
    return torch.softmax(acc(scores) * scale, dim=-1).to(scores.dtype)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """Operator 6: `softmax(scores * scale)` with masked-out keys at probability 0, in fp32.

    scores: [heads, T, S] float; mask: [T, S] bool (True = attend); scale as in `scaled_softmax`
    returns [heads, T, S] in scores' dtype. A row with no allowed key would be NaN; causal rows always
    allow the token itself.
    """
    expect(mask.shape == scores.shape[-2:], f"mask has shape {shape_str(mask)}; expected "
           f"{list(scores.shape[-2:])} for scores of shape {shape_str(scores)}")
    masked = (acc(scores) * scale).masked_fill(~mask, float("-inf"))
    return torch.softmax(masked, dim=-1).to(scores.dtype)


def pv(p: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Operator 7: attention output `P . V`.

    p: [heads, T, S] probabilities; v: [S, kv_heads, head_dim], same dtype
    returns [T, heads, head_dim] in p's dtype.
    """
    expect(p.shape[-1] == v.shape[0], f"p has {p.shape[-1]} keys but v has {v.shape[0]} rows")
    expect(p.shape[0] % v.shape[1] == 0, f"{p.shape[0]} heads are not a multiple of {v.shape[1]} kv heads")
    v = v.repeat_interleave(p.shape[0] // v.shape[1], dim=1)    # [S, heads, head_dim]
    return torch.einsum("hts,shd->thd", p, v)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor,
              scale: float, *, match_hf_rounding: bool = False) -> torch.Tensor:
    """Causal attention from the unfused operators: scores, mask, softmax, P . V.

    q: [T, heads, head_dim] at positions `pos` [T]; k, v: [S, kv_heads, head_dim], the keys/values at
    positions 0 .. S-1 (the new tokens included). returns [T, heads, head_dim] in q's dtype.
    match_hf_rounding: compute as transformers' default (`sdpa`) attention does, see `_attention_hf`
    (the reference model in bf16/fp16 sets it). In bf16 the unfused operators round the scores and the
    normalised probabilities to bf16, as transformers' `eager` attention does, bit for bit.
    """
    if match_hf_rounding:
        return _attention_hf(q, k, v, pos, scale)
    probs = masked_softmax(qk_scores(q, k), causal_mask(pos, k.shape[0]), scale)
    return pv(probs, v)


def _attention_hf(q, k, v, pos, scale):
    """`attention` through torch's fused `scaled_dot_product_attention`, called as transformers' `sdpa`
    attention calls it (for head_dim <= 256, as in Qwen3.5): a whole prompt with `is_causal` and the kv
    heads grouped (`enable_gqa`), one decode token likewise without a mask, tokens after a cache with a
    boolean mask and the kv heads repeated. The fused kernels (FlashAttention on a GPU, the CPU flash
    kernel) keep the scores and the softmax statistics in fp32 and round only the unnormalised
    probabilities, key block by key block against a running max, for the P . V product: a rounding
    internal to each kernel that no op-by-op formula reproduces, so the model calls the kernel that
    transformers calls, with the same arguments.
    """
    group = _gqa_group(q, k)
    T, S = q.shape[0], k.shape[0]
    qh, kh, vh = (x.transpose(0, 1)[None] for x in (q, k, v))     # [1, heads, T | S, head_dim]
    if T == 1 or T == S:                                          # decode, or a whole prompt from position 0
        kw = {"is_causal": T > 1, "enable_gqa": group > 1}
    else:                                                         # tokens after a cache: an explicit mask
        kh, vh = kh.repeat_interleave(group, dim=1), vh.repeat_interleave(group, dim=1)
        kw = {"attn_mask": causal_mask(pos, S)[None, None]}
    o = F.scaled_dot_product_attention(qh, kh, vh, scale=scale, **kw)   # [1, heads, T, head_dim]
    return o[0].transpose(0, 1)


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, length,
                     scale: float) -> torch.Tensor:
    """One decode token attending to the first `length` rows of a static KV cache (FlashDecoding's target).

    q:                [heads, head_dim], the new token (already written to the cache)
    k_cache, v_cache: [max_seq_len, kv_heads, head_dim]
    length:           int or 1-element int tensor, cached tokens including the new one
    returns [heads, head_dim] in q's dtype; computed in fp32 throughout (fp64 for fp64).
    """
    n = _as_int(length)
    expect(0 < n <= k_cache.shape[0], f"length {n} is outside the cache of {k_cache.shape[0]} rows")
    k = acc(k_cache[:n]).repeat_interleave(_gqa_group(q, k_cache), dim=1)   # [n, heads, head_dim]
    v = acc(v_cache[:n]).repeat_interleave(_gqa_group(q, v_cache), dim=1)   # [n, heads, head_dim]
    probs = torch.softmax(torch.einsum("hd,shd->hs", acc(q), k) * scale, dim=-1)  # [heads, n]
    return torch.einsum("hs,shd->hd", probs, v).to(q.dtype)


def output_gate(o: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """`o * sigmoid(gate)`, elementwise in o's dtype, before o_proj.

    o: [T, heads * head_dim] (attention output, heads flattened); gate: the same shape, from q_proj
    """
    expect(o.shape == gate.shape, f"o {shape_str(o)} and gate {shape_str(gate)} must have one shape")
    return o * torch.sigmoid(gate)


def kv_cache_write(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   pos: torch.Tensor):
    """Operator 18: store the new keys/values at their positions, IN PLACE (the cache is a static buffer).

    k, v:             [T, kv_heads, head_dim]
    k_cache, v_cache: [max_seq_len, kv_heads, head_dim], same dtype
    pos:              [T] int positions (decode: one position, read from device memory)
    returns (k_cache, v_cache), the same tensors, updated.
    """
    expect(k.shape[1:] == k_cache.shape[1:] and v.shape[1:] == v_cache.shape[1:],
           f"k {shape_str(k)} / v {shape_str(v)} do not fit caches of shape {shape_str(k_cache)}")
    expect(pos.shape == k.shape[:1], f"pos has shape {shape_str(pos)}; expected [{k.shape[0]}]")
    if pos.numel() and pos.device.type == "cpu":  # on a GPU: no sync; a bad index is a device-side assert
        expect(int(pos.max()) < k_cache.shape[0],
               f"position {int(pos.max())} is past the end of the cache ({k_cache.shape[0]} rows)")
    k_cache[pos.long()] = k
    v_cache[pos.long()] = v
    return k_cache, v_cache


def kv_cache_read(k_cache: torch.Tensor, v_cache: torch.Tensor, length):
    """Operator 19: the first `length` rows of the cache, the keys/values a step attends to.

    k_cache, v_cache: [max_seq_len, kv_heads, head_dim]; length: int or 1-element int tensor
    returns views k, v: [length, kv_heads, head_dim].
    """
    n = _as_int(length)
    expect(0 <= n <= k_cache.shape[0], f"length {n} is outside the cache of {k_cache.shape[0]} rows")
    return k_cache[:n], v_cache[:n]


# --- static shapes: the ops a CUDA graph can capture ------------------------------------------------------
# The references above read `length` and the positions on the host (`int(...)`, slicing by them): exact
# and readable, but a host read is a sync, which CUDA-graph capture forbids, and a slice by a device value
# has a shape PyTorch cannot know. These versions keep every shape static: they work on the whole
# `max_len` cache and mask by the device-side length, as PyTorch under a CUDA graph must (transformers'
# static cache does the same). The benchmarks time them as "torch eager".
def kv_cache_write_static(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                          pos: torch.Tensor):
    """`kv_cache_write` without host-side checks: index_copy_ at the device positions pos [T]."""
    k_cache.index_copy_(0, pos.long(), k)
    v_cache.index_copy_(0, pos.long(), v)
    return k_cache, v_cache


def kv_cache_read_static(k_cache: torch.Tensor, v_cache: torch.Tensor, length: torch.Tensor):
    """The whole cache [max_len, kv_heads, head_dim] with rows >= length (device int [1]) set to 0."""
    keep = (torch.arange(k_cache.shape[0], device=k_cache.device) < length)[:, None, None]   # [max_len, 1, 1]
    return torch.where(keep, k_cache, 0.0), torch.where(keep, v_cache, 0.0)


def decode_attention_static(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            length: torch.Tensor, scale: float) -> torch.Tensor:
    """`decode_attention` over all max_len rows, masking rows >= length (device int [1]).

    q [heads, head_dim]; caches [max_len, kv_heads, head_dim]; returns [heads, head_dim]. Reads the
    whole cache whatever the length: the price of static shapes in PyTorch.
    """
    group = q.shape[0] // k_cache.shape[1]
    k = k_cache.repeat_interleave(group, dim=1)                                # [max_len, heads, head_dim]
    v = v_cache.repeat_interleave(group, dim=1)                                # [max_len, heads, head_dim]
    scores = torch.einsum("hd,shd->hs", q, k)                                  # [heads, max_len]
    visible = torch.arange(k_cache.shape[0], device=q.device) < length        # [max_len]
    probs = torch.softmax(acc(scores) * scale + torch.where(visible, 0.0, float("-inf")), dim=-1)
    return torch.einsum("hs,shd->hd", probs.to(q.dtype), v)
