"""Operator 16: the LM head, logits = x @ E.T with the tied embedding table (the largest single read)."""
from __future__ import annotations

import torch

from .linear import linear


def lm_head(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Logits over the vocabulary.

    x:      [T, hidden] float, after the final norm
    weight: [vocab, hidden], the embedding table when tied (Qwen3.5-0.8B)
    returns [T, vocab] in x's dtype.
    """
    return linear(x, weight)
