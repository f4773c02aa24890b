"""The decode state of Qwen3.5, allocated once: static buffers that decode steps update in place.

- 6 attention layers: a KV cache [max_seq_len, kv_heads, head_dim] each for K and V, in the model dtype.
- 18 DeltaNet layers: the conv state [conv_dim, K] (the last K in_proj_qkv outputs, model dtype) and the
  recurrent state [value_heads, key_dim, value_dim] in fp32 (fp64 for an fp64 model): it accumulates
  over the whole sequence, so bf16 would drift.
The DeltaNet state does not grow with the sequence; only the KV cache does.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch

from ..config import Qwen35Config
from ..reference.precision import acc_dtype
from ..validate import check_count


class CacheTooLarge(ValueError):
    """A sequence longer than the device's memory can hold: refused before anything is allocated."""


def sequence_bytes(config: Qwen35Config, max_seq_len: int, dtype) -> int:
    """Bytes that grow with the sequence: the KV cache, and the RoPE tables (cos, sin) a model keeps for
    as many positions. The DeltaNet states do not grow; they are counted too."""
    c = config
    size, state_size = (torch.empty(0, dtype=d).element_size() for d in (dtype, acc_dtype(dtype)))
    per_token = (2 * len(c.attention_layers) * c.num_key_value_heads * c.head_dim + 2 * c.rotary_dim) * size
    states = len(c.linear_layers) * (c.conv_dim * c.linear_conv_kernel_dim * size + state_size
                                     * c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim)
    return max_seq_len * per_token + states


def device_memory(device) -> int | None:
    """Total bytes of memory of a CUDA device or of this machine (None where unknown: the meta device)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[1]
    if device.type == "cpu" and hasattr(os, "sysconf") and "SC_PHYS_PAGES" in os.sysconf_names:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return None


def _views(flat: torch.Tensor, shapes) -> list[torch.Tensor]:
    """Consecutive contiguous views of the 1-D `flat`, one per shape."""
    views, start = [], 0
    for shape in shapes:
        views.append(flat[start:start + math.prod(shape)].view(shape))
        start += math.prod(shape)
    return views


@dataclass
class Qwen35Cache:
    max_seq_len: int
    k: dict[int, torch.Tensor]          # attention layer -> [max_seq_len, kv_heads, head_dim]
    v: dict[int, torch.Tensor]
    conv: dict[int, torch.Tensor]       # DeltaNet layer -> [conv_dim, conv_kernel]
    state: dict[int, torch.Tensor]      # DeltaNet layer -> [value_heads, key_dim, value_dim]
    storage: tuple[torch.Tensor, ...]   # the flat buffers the tensors above are views of (see allocate)
    length: int = 0                     # tokens already in the cache (= the next token's position)

    @classmethod
    def allocate(cls, config: Qwen35Config, max_seq_len: int, dtype=torch.float32,
                 device="cpu") -> "Qwen35Cache":
        """Every tensor a view into one flat buffer per dtype (the model's; the state's): a new sequence
        zeroes two buffers, two launches rather than one per tensor (48 for Qwen3.5-0.8B). max_seq_len an int:
        1.5 or "3" failed in torch's zeros or a comparison, True in a view."""
        max_seq_len = check_count(max_seq_len, "max_seq_len")
        if not 0 < max_seq_len <= config.max_position_embeddings:
            raise ValueError(f"max_seq_len must be in [1, {config.max_position_embeddings}] "
                             f"(max_position_embeddings), got {max_seq_len}")
        need, have = sequence_bytes(config, max_seq_len, dtype), device_memory(device)
        if have is not None and need > have:   # an allocation would fail, or be killed once touched
            raise CacheTooLarge(f"a sequence of {max_seq_len} tokens needs {need / 2**30:.1f} GiB of cache "
                                f"and RoPE tables, more than the {have / 2**30:.1f} GiB of {device}: ask "
                                "for fewer tokens")
        c = config
        kv_shape = (max_seq_len, c.num_key_value_heads, c.head_dim)
        conv_shape = (c.conv_dim, c.linear_conv_kernel_dim)
        state_shape = (c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim)
        attn, lin = c.attention_layers, c.linear_layers
        model_flat = torch.zeros(2 * len(attn) * math.prod(kv_shape) + len(lin) * math.prod(conv_shape),
                                 dtype=dtype, device=device)
        state_flat = torch.zeros(len(lin) * math.prod(state_shape), dtype=acc_dtype(dtype), device=device)
        n = len(attn)
        model_views = _views(model_flat, [kv_shape] * (2 * n) + [conv_shape] * len(lin))
        return cls(
            max_seq_len=max_seq_len,
            k=dict(zip(attn, model_views[:n])),
            v=dict(zip(attn, model_views[n:2 * n])),
            conv=dict(zip(lin, model_views[2 * n:])),
            state=dict(zip(lin, _views(state_flat, [state_shape] * len(lin)))),
            storage=(model_flat, state_flat),
        )

    def reset(self) -> None:
        """Start a new sequence: zero the DeltaNet's conv and recurrent states, which a step adds into, in place (a
        CUDA graph keeps their addresses). The KV cache keeps the old sequence's rows: every reader stops at the
        length, and a row is written before the length passes it (tests/model/test_reference_model.py plants
        NaN there), so a new prompt does not wait on a memset of the whole cache."""
        model_flat, state_flat = self.storage
        kv = sum(t.numel() for t in (*self.k.values(), *self.v.values()))   # the K/V views come first
        model_flat[kv:].zero_()                                              # the conv states
        state_flat.zero_()
        self.length = 0

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size()
                   for buffers in (self.k, self.v, self.conv, self.state) for t in buffers.values())
