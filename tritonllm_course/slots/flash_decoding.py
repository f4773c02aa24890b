"""Slot spec of chapter 25: FlashDecoding, against the reference `decode_attention` (the length in
device memory, cache rows past it filled with NaN so that a kernel reading them fails).

Tiny: the interpreter's 16-row steps split a cache of a few dozen rows, its length not a multiple of a
step, head_dim 80 (two merge programs of 64 dims); odd heads and head_dim, and length 1 in a 200-row
cache, in the edges. Real: the cache lengths 128 .. 16,384 with max_len = length (timed), then a short
length in a long cache, where most splits are empty.

Edges pass `num_splits` (the default gives tiny caches one 16-row block per split) and a NaN-poisoned
`partials` scratch. Scores rising to the cache's last row over 3 splits of 44 rows: an online softmax
that never rescales is far off, a floored chunk (43) loses the last row, where the maximum is, and a split
masked at the length, not at its end, adds rows of the next one. Length 1 over 5 splits: a merge that
reads the partials of the 4 past the length reads NaN.
"""
import torch

from .. import reference as R
from ..reference.attention import decode_attention_static
from ..reference.fusion import qk_norm_rope_cache
from . import Edge, implement, tensor_bytes
from .attention import ODD, REAL, TINY, WIDE, _decode_bytes, _decode_inputs, rising_scores, with_gate
from .layer_fusion import _prologue_inputs


def split_edge(name: str, splits: int, tiny: dict, real: dict, rising: bool = False) -> list[Edge]:
    """The inputs at `tiny` / `real` with num_splits = `splits` and the partials scratch full of NaN
    (rising: and `rising_scores` over the cache rows in use)."""
    def apply(inputs, shape, dtype, gen):
        q = inputs["q"]
        if rising:
            rising_scores(q, inputs["k_cache"], shape["length"], inputs["scale"])
        inputs["num_splits"] = splits
        inputs["partials"] = torch.full((q.shape[0] * splits * (q.shape[1] + 2),), float("nan"),
                                        dtype=torch.float32, device=q.device)
        return inputs
    return [Edge(name, apply, tiny, presets=("tiny",)), Edge(name, apply, real, presets=("real",))]


RISING = split_edge("scores rising to the last row, 3 splits", 3, {"length": 130, "max_len": 130, **ODD},
                    {"length": 4096, "max_len": 4096}, rising=True)
EDGES = RISING + split_edge("length 1, splits past it", 5, {"length": 1, "max_len": 200, **TINY},
                            {"length": 1, "max_len": 4096})
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
    edges=RISING,
    dims=DIMS,
)


# --- one launch: the q/k prologue, the splits and the merge (the engine's fast level) ------------------
def _fused_inputs(shape, dtype, device, gen):
    """Chapter 22's prologue inputs for one token (q's heads 2 * head_dim apart in the projection row, the
    caches full of old rows) at the cache's row length - 1, plus the gate: the new row holds an old value
    until the kernel writes it, so a kernel that reads it first is off."""
    n = shape["length"]
    inp = _prologue_inputs({**shape, "T": 1}, dtype, device, gen)
    del inp["pos"]
    for name in ("q", "k", "v"):
        inp[name] = inp[name][0]                                     # [heads or kv_heads, head_dim] views
    inp.update(length=torch.tensor([n], dtype=torch.int32, device=device), scale=shape["head_dim"] ** -0.5,
               eps=1e-6)
    return with_gate(lambda *_: inp)(shape, dtype, device, gen)


def _fused_chain(attention):
    def chain(q, k, v, q_weight, k_weight, cos, sin, k_cache, v_cache, length, scale, gate, eps=1e-6,
              num_splits=None, partials=None, counts=None):
        pos = length.reshape(1).to(torch.int64) - 1                                      # [1]
        q_rot, k_cache, v_cache = qk_norm_rope_cache(q[None], k[None], v[None], q_weight, k_weight, cos, sin,
                                                     pos, k_cache, v_cache, eps)         # q_rot [1, heads, D]
        return R.output_gate(attention(q_rot[0], k_cache, v_cache, length, scale), gate), k_cache, v_cache
    return chain


# The chain the one launch replaces: `qk_norm_rope_cache` at position length - 1 (the caches updated),
# decode attention over the first `length` rows, the output gate; returns (out, k_cache, v_cache). The
# static one reads the length in device memory, as a CUDA graph (and the meta device) can.
fused_decode_reference = _fused_chain(R.decode_attention)
fused_decode_static = _fused_chain(decode_attention_static)


def _fused_splits(splits: int):
    def apply(inputs, shape, dtype, gen):
        H, D = inputs["q"].shape
        inputs["num_splits"] = splits
        inputs["partials"] = torch.full((H * splits * (D + 2),), float("nan"), dtype=torch.float32,
                                        device=inputs["q"].device)
        return inputs
    return apply


FUSED_SHAPES = {"tiny": [{"length": 37, "max_len": 45, "rotary_dim": 8, **TINY},
                         {"length": 1, "max_len": 30, "rotary_dim": 24, **ODD}],
                "real": [{"length": n, "max_len": 4096, "rotary_dim": 64, **REAL} for n in (128, 4096)]}

implement(
    "flash_decoding.fused", title="q/k norm + RoPE + cache write + FlashDecoding + gate", chapter="25_flash_decoding",
    qwen="an attention layer's decode step after its projection in one launch; the last split merges",
    family="flash_decoding", function="flash_decoding_fused", reference=fused_decode_reference,
    torch_impl=fused_decode_static,
    make_inputs=_fused_inputs, mutated=("k_cache", "v_cache"),
    make_out=lambda inp: {"out": torch.empty(inp["q"].shape, dtype=inp["q"].dtype, device=inp["q"].device)},
    shapes=FUSED_SHAPES,
    # the q, k, v rows and the gate read, the new rows written, the cache read up to the length, out written
    bytes=lambda inp: (2 * tensor_bytes(inp["q"], inp["gate"]) + 2 * tensor_bytes(inp["k"], inp["v"])
                       + 2 * tensor_bytes(inp["k_cache"][:int(inp["length"][0])])),
    flops=lambda inp: 4 * inp["q"].numel() * int(inp["length"][0]),
    extra={"bench": [0, 1]},
    # 3 splits of a 130-row cache (the new row in the last), and 5 splits of which only the first is used
    edges=[Edge("3 splits, the new row in the last", _fused_splits(3),
                {"length": 130, "max_len": 131, "rotary_dim": 24, **ODD}, presets=("tiny",)),
           Edge("3 splits, the new row in the last", _fused_splits(3),
                {"length": 4096, "max_len": 4096, "rotary_dim": 64, **REAL}, presets=("real",)),
           Edge("length 1 over 5 splits", _fused_splits(5), {"length": 1, "max_len": 40, "rotary_dim": 8, **TINY},
                presets=("tiny",))],
    dims={"out": ("head", "dim"), "k_cache": ("position", "kv head", "column"),
          "v_cache": ("position", "kv head", "column")},
)
