"""Operator 1: the embedding lookup, a row gather from the [vocab, hidden] table."""
from __future__ import annotations

import torch

from .precision import expect


def embedding(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Rows of the embedding table: `weight[ids]`.

    ids:    [T] int32/int64 token ids, each in [0, vocab)
    weight: [vocab, hidden] float (bf16 in the checkpoint)
    returns [T, hidden] in weight's dtype. Qwen3.5 does not scale by sqrt(hidden).
    Out-of-range ids raise a ValueError (for ids on the CPU).
    """
    expect(not ids.is_floating_point(), f"ids must be an integer tensor, got {ids.dtype}")
    if ids.numel() and ids.device.type == "cpu":  # on a GPU the check would stall every call on a sync;
        # there an out-of-range id still fails, as a device-side assert
        lo, hi = int(ids.min()), int(ids.max())
        expect(lo >= 0 and hi < weight.shape[0],
               f"token ids must lie in [0, {weight.shape[0]}); got ids from {lo} to {hi}")
    return weight[ids.long()]
