"""Operator 17: choosing the next token from the logits.

Greedy decoding is an argmax whose ties go to the lowest index, so a kernel and the reference agree
exactly. Sampling divides by a temperature, keeps the top-k logits and then the smallest set of tokens
whose probability reaches top-p, and draws from what is left with a seeded torch.Generator.

The device sampler of chapter 12_sampling has two references of its own, at the end: the filter as a threshold,
and Gumbel-max with given noise.
"""
from __future__ import annotations

import torch

from .precision import acc, expect


def argmax(logits: torch.Tensor) -> torch.Tensor:
    """Index of the largest logit over the last dim; ties go to the lowest index.

    logits: [..., vocab] float
    returns [...] int64. NaN logits raise (a NaN would otherwise win silently).
    """
    expect(not torch.isnan(logits).any(), "logits contain NaN")
    return torch.argmax(logits, dim=-1)  # documented: the first maximal index


def top_k_top_p_filter(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0,
                       keep_ties: bool = False) -> torch.Tensor:
    """Logits with everything outside the top-k and outside the top-p nucleus set to -inf.

    logits:    [..., vocab] float (already divided by the temperature)
    top_k:     keep the k largest (0 = all); ties at the k-th value are all kept
    top_p:     keep the smallest prefix of the sorted distribution whose probability reaches top_p
               (1.0 = all); the most likely token is always kept
    keep_ties: at the top-p boundary, keep every token tied with the last one kept (the rule of a
               sampler that finds a threshold instead of sorting); False keeps a prefix of
               `torch.sort`'s order, as transformers does. The two agree when the boundary is unique.
    returns fp32 (fp64 for fp64) logits of the same shape.
    """
    expect(top_k >= 0, f"top_k must be >= 0, got {top_k}")
    expect(0.0 < top_p <= 1.0, f"top_p must be in (0, 1], got {top_p}")
    logits = acc(logits)
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]        # [..., 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # drop a token when the tokens before it already reach top_p
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p
        if keep_ties:
            last = (~drop_sorted).sum(-1, keepdim=True) - 1               # [..., 1] last kept, sorted
            return logits.masked_fill(logits < sorted_logits.gather(-1, last), float("-inf"))
        drop = drop_sorted.scatter(-1, order, drop_sorted)               # back to vocabulary order
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample(logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
           generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row: softmax(top_k_top_p_filter(logits / temperature)).

    logits:      [..., vocab] float
    temperature: > 0; 0 means greedy (`argmax`)
    generator:   a torch.Generator on logits' device, for reproducible draws
    returns [...] int64.
    """
    expect(temperature >= 0, f"temperature must be >= 0, got {temperature}")
    if temperature == 0:
        return argmax(logits)
    scaled = acc(logits) / temperature
    # -inf is a masked token; +inf or NaN after the division would make softmax NaN, and multinomial fail
    expect(not bool(torch.isnan(scaled).any() | (scaled == float("inf")).any()),
           f"logits / temperature is not finite (largest logit {float(acc(logits).max()):.4g}, temperature "
           f"{temperature}): the logits hold NaN or inf, or the temperature is too small for them")
    probs = torch.softmax(top_k_top_p_filter(scaled, top_k, top_p), dim=-1)
    flat = probs.reshape(-1, probs.shape[-1])                             # [rows, vocab]
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])


# --- the device sampler (chapter 12_sampling) ----------------------------------------------------------------------
# `top_k_top_p_filter` keeps every token tied at the k-th value, but at the top-p boundary it keeps a prefix
# of `torch.sort`'s order, so which of several tied tokens survive depends on the sort. A sampler that
# never sorts finds a threshold instead and keeps every token at or above it. `threshold_filter` is that
# rule; it equals `top_k_top_p_filter` whenever the boundary value is unique.
#
# `sample_with_noise` is the sampler with its random numbers given: argmax(filtered logits / T + noise).
# With Gumbel(0, 1) noise this is an exact draw from softmax(filtered logits / T) (the Gumbel-max trick),
# and a kernel given the same noise must return the same tokens.
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
