"""Slot specs of chapter 06_rope's partial rotate-half RoPE on q and k (operators 3, 4), timed in place."""
import torch

from ..reference.rope import apply_rope, rope_cache
from . import Edge, implement, tensor_bytes


def _inputs(shape, dtype, device, gen):
    T, heads, head_dim = shape["T"], shape["heads"], shape["head_dim"]
    cos, sin = rope_cache(shape["max_pos"], shape["rotary_dim"], theta=1e7, dtype=dtype, device=device)
    return {"x": torch.randn(T, heads, head_dim, dtype=dtype, device=device, generator=gen),
            "cos": cos, "sin": sin,
            "pos": torch.randint(0, shape["max_pos"], (T,), device=device, generator=gen)}


def _bytes(inp):
    """In place: the rotary dims of x read and written, one cos and one sin row per token, the positions."""
    T, heads, _ = inp["x"].shape
    r = inp["cos"].shape[1]
    return (2 * T * heads * r * inp["x"].element_size() + 2 * T * r * inp["cos"].element_size()
            + tensor_bytes(inp["pos"]))


def _ends_of_the_cache(inputs, shape, dtype, gen):
    """Positions 0 and max_pos - 1 (the last one wins at T = 1), which random positions rarely draw: a
    range check off by one at either end turns a valid token into NaN."""
    inputs["pos"][0] = 0
    inputs["pos"][-1] = shape["max_pos"] - 1
    return inputs


CONTEXT = 262144    # Qwen3.5's max_position_embeddings: the tables' length when the whole context is used


def _end_of_the_context(inputs, shape, dtype, gen):
    """Every token within 64 positions of the end of the model's whole context (the last one at it): only
    there are the lowest frequencies' angles large (theta 1e7: the last of 32 pairs turns by
    1e7 ** (-31 / 32), about 1.7e-7 radians, a position), so a rotation that leaves its last pair alone, or a
    table row computed in too few bits, is exact at small positions and wrong here."""
    pos = inputs["pos"]
    pos.copy_(shape["max_pos"] - 1 - torch.randint(0, 64, pos.shape, device=pos.device, generator=gen))
    pos[-1] = shape["max_pos"] - 1
    return inputs


def _rope_slot(name, tiny, real):
    implement(name, family="rope", function="apply_rope_", reference=apply_rope, make_inputs=_inputs,
              make_out=lambda inp: {}, mutated=("x",), bytes=_bytes, shapes={"tiny": tiny, "real": real},
              edges=[Edge("positions 0 and max_pos - 1", _ends_of_the_cache),
                     Edge("positions at the end of the model's context", _end_of_the_context,
                          shape={"max_pos": CONTEXT})],
              dims={"x": ("token", "head", "dim")})


_REAL = {"head_dim": 256, "rotary_dim": 64, "max_pos": 32768}
_rope_slot("q_rope",
           tiny=[{"T": 5, "heads": 3, "head_dim": 40, "rotary_dim": 10, "max_pos": 37},
                 {"T": 1, "heads": 4, "head_dim": 32, "rotary_dim": 8, "max_pos": 4096}],
           real=[{"T": 1, "heads": 8, **_REAL}, {"T": 128, "heads": 8, **_REAL}])
_rope_slot("k_rope",
           tiny=[{"T": 6, "heads": 2, "head_dim": 24, "rotary_dim": 24, "max_pos": 50},
                 {"T": 1, "heads": 1, "head_dim": 36, "rotary_dim": 12, "max_pos": 9}],
           real=[{"T": 1, "heads": 2, **_REAL}, {"T": 128, "heads": 2, **_REAL}])
