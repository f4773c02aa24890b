"""Eager PyTorch versions of the KV-cache and decode-attention ops that a CUDA graph can capture.

The references in `attention.py` read `length` and the positions on the host (`int(...)`, slicing by
them): exact and readable, but a host read is a sync, which CUDA-graph capture forbids, and a slice
by a device value has a shape PyTorch cannot know. These versions keep every shape static: they work
on the whole `max_len` cache and mask by the device-side length, as PyTorch under a CUDA graph must
(transformers' static cache does the same). The benchmarks time them as "torch eager".
"""
from __future__ import annotations

import torch

from .precision import acc


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
