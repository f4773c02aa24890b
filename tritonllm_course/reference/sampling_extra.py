"""References for the device sampler of chapter 12: the filter as a threshold, and Gumbel-max with given noise.

`reference.sampling.top_k_top_p_filter` keeps every token tied at the k-th value, but at the top-p
boundary it keeps a prefix of `torch.sort`'s order, so which of several tied tokens survive depends on
the sort. A sampler that never sorts finds a threshold instead and keeps every token at or above it.
`threshold_filter` is that rule; it equals `top_k_top_p_filter` whenever the boundary value is unique.

`sample_with_noise` is the sampler with its random numbers given: argmax(filtered logits / T + noise).
With Gumbel(0, 1) noise this is an exact draw from softmax(filtered logits / T) (the Gumbel-max trick),
and a kernel given the same noise must return the same tokens.
"""
from __future__ import annotations

import torch

from .precision import acc, expect
from .sampling import argmax


def threshold_filter(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Logits outside the top-k and the top-p nucleus set to -inf; ties at either boundary are kept.

    logits: [..., vocab] float (already divided by the temperature)
    top_k:  keep the values >= the k-th largest (0 = all)
    top_p:  then keep the values >= t, t the largest value whose tokens at or above it carry
            probability >= top_p (1.0 = all)
    returns fp32 (fp64 for fp64) logits of the same shape.
    """
    expect(top_k >= 0, f"top_k must be >= 0, got {top_k}")
    expect(0.0 < top_p <= 1.0, f"top_p must be in (0, 1], got {top_p}")
    logits = acc(logits)
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]         # [..., 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits = torch.sort(logits, dim=-1, descending=True).values
        probs = torch.softmax(sorted_logits, dim=-1)
        kept = (probs.cumsum(-1) - probs) < top_p                          # a prefix of the sorted order
        last = kept.sum(-1, keepdim=True) - 1                              # [..., 1]
        threshold = sorted_logits.gather(-1, last)                         # the last kept value
        logits = logits.masked_fill(logits < threshold, float("-inf"))
    return logits


def sample_with_noise(logits: torch.Tensor, noise: torch.Tensor, temperature: float = 1.0, top_k: int = 0,
                      top_p: float = 1.0) -> torch.Tensor:
    """argmax(threshold_filter(logits / temperature) + noise): one token per row.

    logits:      [..., vocab] float
    noise:       [..., vocab] float, Gumbel(0, 1) for a draw from the softmax
    temperature: > 0
    returns [...] int64.
    """
    expect(temperature > 0, f"temperature must be > 0, got {temperature}")
    expect(noise.shape == logits.shape, f"noise {list(noise.shape)} and logits {list(logits.shape)} differ")
    filtered = threshold_filter(acc(logits) / temperature, top_k, top_p)
    return argmax(filtered + noise.to(filtered.dtype))
