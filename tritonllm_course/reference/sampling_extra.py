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
from .sampling import argmax, top_k_top_p_filter


def threshold_filter(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """`top_k_top_p_filter` keeping every token tied at either boundary: the device sampler's rule."""
    return top_k_top_p_filter(logits, top_k, top_p, keep_ties=True)


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
