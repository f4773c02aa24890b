"""Slot spec of chapter 24: FlashDecoding, against the reference `decode_attention` (the length in
device memory, cache rows past it filled with NaN so that a kernel reading them fails).

Tiny: the interpreter's 16-row steps split caches of a few dozen rows; lengths that are not a multiple
of a step, length 1 in a 200-row cache (one split in use of 13), odd heads and head_dim. Real: the
cache lengths 128 .. 16,384 with max_len = length (timed), then a short length in a long cache, where
most splits are empty.
"""
import torch

from .. import reference as R
from ..reference.attention_extra import decode_attention_static
from . import implement, tensor_bytes
from .attention import ODD, REAL, TINY, _decode_bytes, _decode_inputs, with_gate

implement(
    "flash_decoding", family="flash_decoding", function="flash_decoding", reference=R.decode_attention,
    torch_impl=decode_attention_static,
    make_inputs=_decode_inputs,
    make_out=lambda inp: {"out": torch.empty_like(inp["q"])},
    shapes={"tiny": [{"length": 37, "max_len": 45, **TINY}, {"length": 1, "max_len": 200, **TINY},
                     {"length": 100, "max_len": 130, **ODD}],
            "real": [{"length": n, "max_len": n, **REAL} for n in (128, 1024, 4096, 16384)]
            + [{"length": 1, "max_len": 4096, **REAL}, {"length": 1000, "max_len": 16384, **REAL}]},
    bytes=_decode_bytes,
    flops=lambda inp: 4 * inp["q"].numel() * int(inp["length"][0]),
    extra={"bench": [0, 1, 2, 3]},   # timed: the four lengths; the short-in-long caches are for the check
)


# --- with the output gate (the engine's fast level) ---------------------------------------------------
def gated_decode_attention(q, k_cache, v_cache, length, scale, gate):
    """The reference chain the fused kernels replace: decode attention, then the output gate."""
    return R.output_gate(R.decode_attention(q, k_cache, v_cache, length, scale), gate)


def gated_decode_attention_static(q, k_cache, v_cache, length, scale, gate):
    """The same over the static cache, the length in device memory (what a CUDA graph can capture)."""
    return R.output_gate(decode_attention_static(q, k_cache, v_cache, length, scale), gate)


implement(
    "flash_decoding.gated", title="FlashDecoding + output gate", chapter="24_flash_decoding",
    qwen="one token's split attention with o * sigmoid(gate) applied by the merge",
    family="flash_decoding", function="flash_decoding", reference=gated_decode_attention,
    torch_impl=gated_decode_attention_static,
    make_inputs=with_gate(_decode_inputs),
    make_out=lambda inp: {"out": torch.empty_like(inp["q"])},
    shapes={"tiny": [{"length": 37, "max_len": 45, **TINY}, {"length": 100, "max_len": 130, **ODD}],
            "real": [{"length": 128, "max_len": 128, **REAL}, {"length": 4096, "max_len": 4096, **REAL}]},
    bytes=lambda inp: _decode_bytes(inp) + tensor_bytes(inp["gate"]),
    flops=lambda inp: 4 * inp["q"].numel() * int(inp["length"][0]),
    extra={"bench": [0, 1]},
)
