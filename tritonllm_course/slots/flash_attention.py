"""Slot spec of chapter 23_flash_attention: FlashAttention for prefill, against the reference `attention`.

Shapes as in chapter 08_attention ("tokens" queries at the last T of "keys" positions). Tiny: the interpreter's
32-row, 16-key tiles cross several row blocks, whole (bulk) key blocks and diagonal ones; one token at
position 64, the first key of a block (a diagonal loop that stops at the newest position misses it).
Real: the prefill of a 128-, 1,024- and 4,096-token prompt, a prompt continued after cached tokens, and
one token at position 1,024 (the first key of a 64-key block).
Edges: scores rising along the keys, so that every key block raises the online softmax's max; every score
far below zero (a running max that starts at 0 divides 0 by 0), then far above it; positions with gaps and keys
after the newest query (each position read, not taken to be the last T of the keys or a run from the first).
"""
import torch

from .. import reference as R
from . import implement, tensor_bytes
from .attention import (GAPPED_POSITIONS, ODD, REAL, TINY, _attention_inputs, rising_edge, shifted_edges,
                        with_gate)


def _bytes(inp):
    # what must cross HBM: q, k, v and the positions in, the output out; no [T, S] score ever
    return tensor_bytes(inp["q"], inp["k"], inp["v"], inp["pos"], inp["q"])


def _flops(inp):
    # causal: token t does 2 * head_dim FLOPs for q . k and 2 * head_dim for p . v per head and visible key
    return 4 * inp["q"].shape[1] * inp["q"].shape[2] * int((inp["pos"].long() + 1).sum())


# 7 tokens at 63 .. 69: four whole (bulk) key blocks, then the diagonal one
RISING = (rising_edge("k", {"tokens": 7, "keys": 70, **ODD}, {"tokens": 100, "keys": 612}) + shifted_edges("k")
          + GAPPED_POSITIONS)
DIMS = {"out": ("token", "head", "dim")}

implement(
    "flash_attention", family="flash_attention", function="flash_attention", reference=R.attention,
    make_inputs=_attention_inputs,
    make_out=lambda inp: {"out": torch.empty_like(inp["q"])},
    shapes={"tiny": [{"tokens": 37, "keys": 37, **TINY}, {"tokens": 1, "keys": 65, **TINY},
                     {"tokens": 29, "keys": 70, **ODD}],
            "real": [{"tokens": 128, "keys": 128, **REAL}, {"tokens": 1024, "keys": 1024, **REAL},
                     {"tokens": 4096, "keys": 4096, **REAL}, {"tokens": 100, "keys": 612, **REAL},
                     {"tokens": 1, "keys": 1025, **REAL}]},
    bytes=_bytes,
    flops=_flops,
    extra={"bench": [0, 1, 2]},      # timed: the three prompt lengths; the others are for the check
    edges=RISING,
    dims=DIMS,
)


# --- with the output gate (the engine's fast level) ---------------------------------------------------
def gated_attention(q, k, v, pos, scale, gate):
    """The reference chain the fused kernel replaces: attention, then the output gate."""
    return R.output_gate(R.attention(q, k, v, pos, scale), gate)


implement(
    "flash_attention.gated", title="FlashAttention + output gate", chapter="23_flash_attention",
    qwen="the prompt's attention with o * sigmoid(gate) applied to the output tile before its store",
    family="flash_attention", function="flash_attention", reference=gated_attention,
    make_inputs=with_gate(_attention_inputs),
    make_out=lambda inp: {"out": torch.empty_like(inp["q"])},
    # one token at position 64 as in the ungated slot: the same kernel, checked at the same block edges
    shapes={"tiny": [{"tokens": 37, "keys": 37, **TINY}, {"tokens": 29, "keys": 70, **ODD},
                     {"tokens": 1, "keys": 65, **TINY}],
            "real": [{"tokens": 128, "keys": 128, **REAL}, {"tokens": 100, "keys": 612, **REAL}]},
    bytes=lambda inp: _bytes(inp) + tensor_bytes(inp["gate"]),
    flops=_flops,
    extra={"bench": [0]},
    edges=RISING,
    dims=DIMS,
)
