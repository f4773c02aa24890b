"""Host-side checks of positions and lengths that live in device memory (KV cache and attention).

A decode step reads its position and cache length from int tensors on the device, so that a CUDA
graph replays with the current values. Checking such a value on the host means reading it: free on
the CPU, a sync on a GPU in eager mode, and impossible while a CUDA graph is being captured. There the
kernels' masks are the only guard: they never touch memory outside the buffers.
"""
from __future__ import annotations

import torch


def readable(t: torch.Tensor) -> bool:
    """Can the host read `t` now? Not while the current CUDA stream is being captured."""
    return not (t.is_cuda and torch.cuda.is_current_stream_capturing())


def check_range(t: torch.Tensor, lo: int, hi: int, what: str, why: str) -> None:
    """Raise a ValueError naming the first value of `t` outside [lo, hi], where `t` can be read."""
    if t.numel() == 0 or not readable(t):
        return
    first, last = int(t.min()), int(t.max())
    if first < lo or last > hi:
        bad = first if first < lo else last
        raise ValueError(f"{what} {bad} is outside [{lo}, {hi}]: {why}")
