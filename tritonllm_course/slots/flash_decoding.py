"""Slot spec of chapter 25_flash_decoding: FlashDecoding, against the reference `decode_attention` (the length in
device memory, cache rows past it filled with NaN so that a kernel reading them fails).

Tiny: the interpreter's 16-row steps split a cache of a few dozen rows, its length not a multiple of a
step, head_dim 80 (two merge programs of 64 dims); odd heads and head_dim, and length 1 in a 200-row
cache, in the edges. Real: the cache lengths 128 .. 16,384 with max_len = length (timed), then a short
length in a long cache, where most splits are empty.

Edges pass `num_splits` (the default gives tiny caches one 16-row block per split) and a NaN-poisoned
`partials` scratch. Scores rising to the cache's last row over 3 splits of 44 rows: an online softmax
that never rescales is far off, a floored chunk (43) loses the last row, where the maximum is, and a split
masked at the length, not at its end, adds rows of the next one. Length 1 over 5 splits: a merge that
reads the partials of the 4 past the length reads NaN. Every score far below zero (then far above), 3
splits (the merge's 4 lanes pad one): a split whose running max starts at 0, or a merge that pads the
unused splits' maxima with 0, divides 0 by 0. A 40-row cache in a 200-row buffer over 5 splits (1,000 in
16,384 on a GPU): split and merge kernels that take the chunk from different lengths (the buffer's, the
cache's) agree on the split count only by coincidence at the other shapes. A length of whole splits (48 rows
over 3): a merge that counts one split too many reads it only there.
"""
import torch

from .. import reference as R
from ..reference.attention import decode_attention_static
from . import Edge, implement, tensor_bytes
from .attention import (FAR, FAR_TOL, ODD, REAL, TINY, WIDE, _decode_bytes, _decode_inputs, rising_scores,
                        shifted_scores, with_gate)


def split_edge(name: str, splits: int, tiny: dict, real: dict, rising: bool = False,
               shift: float = 0.0, tol: dict | None = None) -> list[Edge]:
    """The inputs at `tiny` / `real` with num_splits = `splits` and the partials scratch full of NaN
    (rising: and `rising_scores` over the cache rows in use; shift: every score moved by it)."""
    def apply(inputs, shape, dtype, gen):
        q = inputs["q"]
        if rising:
            rising_scores(q, inputs["k_cache"], shape["length"], inputs["scale"])
        if shift:
            shifted_scores(q, inputs["k_cache"], shape["length"], inputs["scale"], shift)
        inputs["num_splits"] = splits
        inputs["partials"] = torch.full((q.shape[0] * splits * (q.shape[1] + 2),), float("nan"),
                                        dtype=torch.float32, device=q.device)
        return inputs
    return [Edge(name, apply, tiny, presets=("tiny",), tol=tol), Edge(name, apply, real, presets=("real",), tol=tol)]


RISING = split_edge("scores rising to the last row, 3 splits", 3, {"length": 130, "max_len": 130, **ODD},
                    {"length": 4096, "max_len": 4096}, rising=True)
SHIFTED = [edge for name, shift in (("every score far below zero", -FAR), ("every score far above zero", FAR))
           for edge in split_edge(f"{name}, 3 splits", 3, {"length": 37, "max_len": 45, **WIDE},
                                  {"length": 1000, "max_len": 16384}, shift=shift, tol=FAR_TOL)]
# 48 rows over 3 splits of 16 (1,536 over 3 of 512 on a GPU): the splits end exactly at the length, the one case
# where a merge that counts the splits in use as length // chunk + 1, not cdiv(length, chunk), reads one more
# (the scratch's NaN, or the next head's first split: 3 splits pad the merge's lanes to 4)
WHOLE_SPLITS = split_edge("a length of whole splits, 3 splits", 3, {"length": 48, "max_len": 60, **TINY},
                          {"length": 1536, "max_len": 4096})
EDGES = (RISING + SHIFTED + WHOLE_SPLITS
         + split_edge("length 1, splits past it", 5, {"length": 1, "max_len": 200, **TINY},
                      {"length": 1, "max_len": 4096})
         + split_edge("a cache much shorter than its buffer, 5 splits", 5, {"length": 40, "max_len": 200, **TINY},
                      {"length": 1000, "max_len": 16384}))
DIMS = {"out": ("head", "dim")}


def decode_reference(q, k_cache, v_cache, length, scale, num_splits=None, partials=None):
    """`decode_attention`; the split count and scratch that the edges pass change nothing in the result."""
    return R.decode_attention(q, k_cache, v_cache, length, scale)


implement(
    "flash_decoding", family="flash_decoding", function="flash_decoding", reference=decode_reference,
    torch_impl=decode_attention_static,
    make_inputs=_decode_inputs,
    make_out=lambda inp: {"out": torch.empty_like(inp["q"])},
    shapes={"tiny": [{"length": 37, "max_len": 45, **WIDE}],     # length 1 and odd sizes in the edges
            "real": [{"length": n, "max_len": n, **REAL} for n in (128, 1024, 4096, 16384)]
            + [{"length": 1, "max_len": 4096, **REAL}, {"length": 1000, "max_len": 16384, **REAL}]},
    bytes=_decode_bytes,
    flops=lambda inp: 4 * inp["q"].numel() * int(inp["length"][0]),
    extra={"bench": [0, 1, 2, 3]},   # timed: the four lengths; the short-in-long caches are for the check
    edges=EDGES,
    dims=DIMS,
)


# --- with the output gate (the engine's fast level) ---------------------------------------------------
def gated_decode_attention(q, k_cache, v_cache, length, scale, gate, num_splits=None, partials=None):
    """The reference chain the fused kernels replace: decode attention, then the output gate (the edges'
    split count and scratch change nothing in the result)."""
    return R.output_gate(R.decode_attention(q, k_cache, v_cache, length, scale), gate)


def gated_decode_attention_static(q, k_cache, v_cache, length, scale, gate):
    """The same over the static cache, the length in device memory (what a CUDA graph can capture)."""
    return R.output_gate(decode_attention_static(q, k_cache, v_cache, length, scale), gate)


implement(
    "flash_decoding.gated", title="FlashDecoding + output gate", chapter="25_flash_decoding",
    qwen="one token's split attention with o * sigmoid(gate) applied by the merge",
    family="flash_decoding", function="flash_decoding", reference=gated_decode_attention,
    torch_impl=gated_decode_attention_static,
    make_inputs=with_gate(_decode_inputs),
    make_out=lambda inp: {"out": torch.empty_like(inp["q"])},
    shapes={"tiny": [{"length": 37, "max_len": 45, **TINY}],     # odd sizes in the edge
            "real": [{"length": 128, "max_len": 128, **REAL}, {"length": 4096, "max_len": 4096, **REAL}]},
    bytes=lambda inp: _decode_bytes(inp) + tensor_bytes(inp["gate"]),
    flops=lambda inp: 4 * inp["q"].numel() * int(inp["length"][0]),
    extra={"bench": [0, 1]},
    edges=RISING + SHIFTED + WHOLE_SPLITS,
    dims=DIMS,
)
