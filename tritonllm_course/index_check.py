"""Host-side range check of the index tensors kernels use to address a table: token ids into the
embedding, positions into the RoPE cos/sin cache.

A kernel handed an index outside its table reads foreign memory. Checking the range needs the minimum
and the maximum on the host: on the GPU that is a device-to-host sync, which costs microseconds and is
not allowed inside a CUDA graph. So the wrappers check by default, skip the check while a graph is being
captured, and let an engine that produces its own indices turn it off. Their kernels never read outside
the table either way: an out-of-range index gives a NaN row (see solutions/embedding.py).
"""
from __future__ import annotations

import torch


def check_range(idx: torch.Tensor, size: int, name: str) -> None:
    """Raise a ValueError naming `name` unless every value of the integer tensor idx lies in [0, size)."""
    if idx.numel() == 0 or (idx.is_cuda and torch.cuda.is_current_stream_capturing()):
        return
    lo, hi = (int(v) for v in torch.aminmax(idx))
    if lo < 0 or hi >= size:
        bad = idx[(idx < 0) | (idx >= size)]
        raise ValueError(f"{name} must lie in [0, {size}); got {bad.numel()} outside it "
                         f"(values from {lo} to {hi}, first bad one {int(bad[0])})")
