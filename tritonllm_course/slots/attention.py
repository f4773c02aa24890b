"""Slot specs of chapter 08: the attention pipeline op by op (operators 5, 20, 21, 6, 7), the fused
decode and prefill attention, and the output gate.

Shapes: "heads"/"kv_heads"/"head_dim" as in Qwen3.5 (8 / 2 / 256; tiny: 4 / 2 / 32, or odd sizes),
"tokens" = T queries, "keys" = S keys. Queries sit at the last T positions of the S keys (a prefill
after `S - T` cached tokens), so the causal mask has both full and partial rows.
"""
import math

import torch

from .. import reference as R
from ..reference.attention_extra import decode_attention_static
from . import implement, tensor_bytes

TINY = {"heads": 4, "kv_heads": 2, "head_dim": 32}
ODD = {"heads": 6, "kv_heads": 2, "head_dim": 24}     # G = 3, head_dim not a power of two
REAL = {"heads": 8, "kv_heads": 2, "head_dim": 256}


def _randn(gen, dtype, device, *size, std=1.0):
    return torch.randn(size, dtype=torch.float32, device=device, generator=gen).mul_(std).to(dtype)


def _positions(shape, device):
    T, S = shape["tokens"], shape["keys"]
    return torch.arange(S - T, S, dtype=torch.int32, device=device)                  # [T]


def _scale(inp_or_shape) -> float:
    return 1.0 / math.sqrt(inp_or_shape["head_dim"])


def _scores(shape, dtype, device, gen):
    # raw q . k of unit-rms 256-dim vectors have a standard deviation of sqrt(head_dim) = 16
    D = shape["head_dim"]
    return _randn(gen, dtype, device, shape["heads"], shape["tokens"], shape["keys"], std=math.sqrt(D))


# --- op 5 ------------------------------------------------------------------------------------------
def _qk_inputs(shape, dtype, device, gen):
    return {"q": _randn(gen, dtype, device, shape["tokens"], shape["heads"], shape["head_dim"]),
            "k": _randn(gen, dtype, device, shape["keys"], shape["kv_heads"], shape["head_dim"])}


implement(
    "qk_score", family="attention", function="qk_scores", reference=R.qk_scores,
    make_inputs=_qk_inputs,
    make_out=lambda inp: {"out": inp["q"].new_empty(inp["q"].shape[1], inp["q"].shape[0], inp["k"].shape[0])},
    shapes={"tiny": [{"tokens": 37, "keys": 45, **TINY}, {"tokens": 1, "keys": 45, **TINY},
                     {"tokens": 7, "keys": 19, **ODD}],
            "real": [{"tokens": 128, "keys": 128, **REAL}, {"tokens": 1, "keys": 4096, **REAL}]},
    bytes=lambda inp: tensor_bytes(inp["q"], inp["k"])
    + inp["q"].shape[0] * inp["q"].shape[1] * inp["k"].shape[0] * inp["q"].element_size(),
    flops=lambda inp: 2 * inp["q"].numel() * inp["k"].shape[0],
)


# --- op 20 -----------------------------------------------------------------------------------------
implement(
    "causal_mask_gen", family="attention", function="causal_mask",
    # bool compared as int8: the check poisons outputs with the dtype's minimum, which bool lacks
    reference=lambda pos, kv_len: R.causal_mask(pos, kv_len).to(torch.int8),
    torch_impl=R.causal_mask,
    make_inputs=lambda shape, dtype, device, gen: {"pos": _positions(shape, device), "kv_len": shape["keys"]},
    make_out=lambda inp: {"out": torch.empty(inp["pos"].shape[0], inp["kv_len"], dtype=torch.int8,
                                             device=inp["pos"].device)},
    exact=True,
    shapes={"tiny": [{"tokens": 37, "keys": 45}, {"tokens": 1, "keys": 45}, {"tokens": 200, "keys": 200}],
            "real": [{"tokens": 128, "keys": 128}, {"tokens": 1, "keys": 4096}]},
    bytes=lambda inp: inp["pos"].shape[0] * (inp["kv_len"] + inp["pos"].element_size()),
)


# --- ops 21 and 6 ----------------------------------------------------------------------------------
implement(
    "scale_softmax", family="attention", function="scaled_softmax", reference=R.scaled_softmax,
    make_inputs=lambda shape, dtype, device, gen: {"scores": _scores(shape, dtype, device, gen),
                                                   "scale": _scale(shape)},
    make_out=lambda inp: {"out": torch.empty_like(inp["scores"])},
    shapes={"tiny": [{"tokens": 13, "keys": 21, **TINY}, {"tokens": 1, "keys": 3000, **TINY}],
            "real": [{"tokens": 128, "keys": 128, **REAL}, {"tokens": 1, "keys": 4096, **REAL}]},
    bytes=lambda inp: 2 * tensor_bytes(inp["scores"]),
)


def _masked_inputs(shape, dtype, device, gen):
    return {"scores": _scores(shape, dtype, device, gen),
            "mask": R.causal_mask(_positions(shape, device), shape["keys"]), "scale": _scale(shape)}


implement(
    "softmax_mask", family="attention", function="masked_softmax", reference=R.masked_softmax,
    make_inputs=_masked_inputs,
    make_out=lambda inp: {"out": torch.empty_like(inp["scores"])},
    shapes={"tiny": [{"tokens": 13, "keys": 21, **TINY}, {"tokens": 5, "keys": 2500, **TINY}],
            "real": [{"tokens": 128, "keys": 128, **REAL}, {"tokens": 1, "keys": 4096, **REAL}]},
    bytes=lambda inp: 2 * tensor_bytes(inp["scores"]) + tensor_bytes(inp["mask"]),
)


# --- op 7 ------------------------------------------------------------------------------------------
def _pv_inputs(shape, dtype, device, gen):
    probs = torch.softmax(_scores(shape, torch.float32, device, gen) * _scale(shape), dim=-1)
    return {"p": probs.to(dtype),
            "v": _randn(gen, dtype, device, shape["keys"], shape["kv_heads"], shape["head_dim"])}


implement(
    "pv_agg", family="attention", function="pv", reference=R.pv,
    make_inputs=_pv_inputs,
    make_out=lambda inp: {"out": inp["v"].new_empty(inp["p"].shape[1], inp["p"].shape[0], inp["v"].shape[2])},
    shapes={"tiny": [{"tokens": 37, "keys": 45, **TINY}, {"tokens": 1, "keys": 45, **TINY},
                     {"tokens": 7, "keys": 19, **ODD}],
            "real": [{"tokens": 128, "keys": 128, **REAL}, {"tokens": 1, "keys": 4096, **REAL}]},
    bytes=lambda inp: tensor_bytes(inp["p"], inp["v"])
    + inp["p"].shape[0] * inp["p"].shape[1] * inp["v"].shape[2] * inp["v"].element_size(),
    flops=lambda inp: 2 * inp["p"].numel() * inp["v"].shape[2],
)


# --- fused decode attention ------------------------------------------------------------------------
def _decode_inputs(shape, dtype, device, gen):
    n, L = shape["length"], shape["max_len"]
    kv = (L, shape["kv_heads"], shape["head_dim"])
    k_cache, v_cache = _randn(gen, dtype, device, *kv), _randn(gen, dtype, device, *kv)
    k_cache[n:] = float("nan")     # rows past the length: a kernel that reads them returns NaN
    v_cache[n:] = float("nan")
    return {"q": _randn(gen, dtype, device, shape["heads"], shape["head_dim"]),
            "k_cache": k_cache, "v_cache": v_cache,
            "length": torch.tensor([n], dtype=torch.int32, device=device), "scale": _scale(shape)}


def _decode_bytes(inp):
    n = int(inp["length"][0])
    return 2 * tensor_bytes(inp["q"]) + 2 * tensor_bytes(inp["k_cache"][:n])


implement(
    "decode_attention", title="decode attention (fused)", op=None, chapter="08_attention",
    qwen="one token over the KV cache: scores, softmax, P.V in one kernel; length in device memory",
    family="attention", function="decode_attention", reference=R.decode_attention,
    torch_impl=decode_attention_static,
    make_inputs=_decode_inputs,
    make_out=lambda inp: {"out": torch.empty_like(inp["q"])},
    shapes={"tiny": [{"length": 37, "max_len": 45, **TINY}, {"length": 1, "max_len": 45, **TINY},
                     {"length": 100, "max_len": 130, **ODD}],
            "real": [{"length": 4096, "max_len": 4096, **REAL}, {"length": 1024, "max_len": 4096, **REAL},
                     {"length": 128, "max_len": 4096, **REAL}]},
    bytes=_decode_bytes,
    flops=lambda inp: 4 * inp["q"].numel() * int(inp["length"][0]),
)


# --- causal prefill attention ----------------------------------------------------------------------
def _attention_inputs(shape, dtype, device, gen):
    S, kv = shape["keys"], (shape["keys"], shape["kv_heads"], shape["head_dim"])
    return {"q": _randn(gen, dtype, device, shape["tokens"], shape["heads"], shape["head_dim"]),
            "k": _randn(gen, dtype, device, *kv), "v": _randn(gen, dtype, device, *kv),
            "pos": _positions(shape, device), "scale": _scale(shape)}


implement(
    "prefill_attention", title="causal attention (prefill)", op=None, chapter="08_attention",
    qwen="T queries over their keys with the causal mask and GQA (two passes over the keys)",
    family="attention", function="attention", reference=R.attention,
    make_inputs=_attention_inputs,
    make_out=lambda inp: {"out": torch.empty_like(inp["q"])},
    shapes={"tiny": [{"tokens": 37, "keys": 37, **TINY}, {"tokens": 7, "keys": 45, **ODD},
                     {"tokens": 1, "keys": 45, **TINY}],
            "real": [{"tokens": 128, "keys": 128, **REAL}, {"tokens": 1, "keys": 1024, **REAL}]},
    bytes=lambda inp: tensor_bytes(inp["q"], inp["k"], inp["v"], inp["pos"], inp["q"]),
    # causal: token t does 4 * head_dim FLOPs per head for each of its pos[t] + 1 keys
    flops=lambda inp: 4 * inp["q"].shape[1] * inp["q"].shape[2] * int((inp["pos"].long() + 1).sum()),
)


# --- output gate -----------------------------------------------------------------------------------
def with_gate(make_inputs):
    """make_inputs plus "gate", shaped like "q": the inputs of a kernel with the output gate fused in."""
    def make(shape, dtype, device, gen):
        inp = make_inputs(shape, dtype, device, gen)
        inp["gate"] = _randn(gen, dtype, device, *inp["q"].shape, std=2.0)
        return inp
    return make


def _gate_inputs(shape, dtype, device, gen):
    return {"o": _randn(gen, dtype, device, shape["tokens"], shape["width"]),
            "gate": _randn(gen, dtype, device, shape["tokens"], shape["width"])}


implement(
    "attn_output_gate", family="attention", function="output_gate", reference=R.output_gate,
    make_inputs=_gate_inputs,
    make_out=lambda inp: {"out": torch.empty_like(inp["o"])},
    shapes={"tiny": [{"tokens": 7, "width": 100}, {"tokens": 1, "width": 128}],
            "real": [{"tokens": 1, "width": 2048}, {"tokens": 128, "width": 2048}]},
    bytes=lambda inp: 3 * tensor_bytes(inp["o"]),
)
