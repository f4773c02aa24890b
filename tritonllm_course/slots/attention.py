"""Slot specs of chapter 08_attention: the attention pipeline op by op (operators 5, 20, 21, 6, 7), the fused
decode and prefill attention, and the output gate.

Shapes: "heads"/"kv_heads"/"head_dim" as in Qwen3.5 (8 / 2 / 256; tiny: 4 / 2 / 32, or odd sizes),
"tokens" = T queries, "keys" = S keys. Queries sit at the last T positions of the S keys (a prefill
after `S - T` cached tokens), so the causal mask has both full and partial rows; an edge of the causal slots
draws them with gaps, the newest before the last keys, so that a kernel must read each position.

Tiny shapes cross every tile boundary the interpreter's kernels have: more than one program on each
grid axis (keys past 64, head_dim past 32 or 64), a partial last tile, a newest position at the start
of a key block (key 64 of 65: a loop that stops at the position instead of after it misses it).
"""
import math

import torch

from .. import reference as R
from ..reference.attention import decode_attention_static
from . import Edge, implement, tensor_bytes
from .common import past_exp_overflow, scaled

TINY = {"heads": 4, "kv_heads": 2, "head_dim": 32}
ODD = {"heads": 6, "kv_heads": 2, "head_dim": 24}     # G = 3, head_dim not a power of two
WIDE = {"heads": 4, "kv_heads": 2, "head_dim": 80}    # head_dim past one 32- or 64-wide tile, not a power of two
REAL = {"heads": 8, "kv_heads": 2, "head_dim": 256}
RAMP = 8.0    # natural-log units the scaled scores rise by from the first key to the last


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


def rising_scores(q, k, n: int, scale: float) -> None:
    """In place: scores q . k[j] * scale that rise by RAMP from key 0 to key n-1, so that the maximum sits
    in the last key block. An online softmax then raises its max block after block: one that never
    rescales its accumulator or sum is far off (random scores give a late max only sometimes).
    q [..., D]: its component along u = ones / sqrt(D) set to A; k [rows, KV, D]: k[j] += ramp(j) u for
    j < n (rows past n, the NaN of a cache past its length, stay)."""
    A = 3.0
    D = q.shape[-1]
    u = torch.full((D,), D ** -0.5, dtype=torch.float32, device=q.device)
    qf = q.to(torch.float32)
    q.copy_(qf - (qf @ u)[..., None] * u + A * u)
    ramp = torch.arange(n, dtype=torch.float32, device=k.device) * (RAMP / (A * scale * max(n - 1, 1)))
    k[:n] = (k[:n].to(torch.float32) + ramp[:, None, None] * u).to(k.dtype)


# Scaled scores this far from zero (natural-log units): exp(-120) is 0 in fp32 (it underflows below about
# -104), and so is fp16 exp(x) of scores far above. An online softmax whose running max starts at 0 instead
# of -inf (or a merge that pads unused splits' maxima with 0) is exact until a row's every score is below
# about -87, then returns 0 / 0; random scores never go there. fp32 keeps a score of 120 to about 1e-5 of
# itself (and its q . k sums D such products): the probabilities of a correct kernel are that far off.
FAR = 120.0
FAR_TOL = {torch.float32: 4e-5}


def shifted_scores(q, k, n: int, scale: float, shift: float) -> None:
    """In place: every score q . k[j] * scale of the keys j < n moved by `shift` (natural-log units); the
    softmax over them is unchanged. q's component along u = ones / sqrt(D) set to A, k[j] += shift / (A
    scale) u for j < n (rows past n, the NaN of a cache past its length, stay)."""
    A = 3.0
    D = q.shape[-1]
    u = torch.full((D,), D ** -0.5, dtype=torch.float32, device=q.device)
    qf = q.to(torch.float32)
    q.copy_(qf - (qf @ u)[..., None] * u + A * u)
    k[:n] = (k[:n].to(torch.float32) + (shift / (A * scale)) * u).to(k.dtype)


def shifted_edges(k_key: str) -> list[Edge]:
    """Every score of every row far below zero, then far above it (`shifted_scores`), at the slot's first
    shape: the inputs of a kernel with q, `k_key` (k or k_cache) and scale."""
    def edge(name, shift):
        def apply(inputs, shape, dtype, gen):
            n = shape["length"] if "length" in shape else shape["keys"]
            shifted_scores(inputs["q"], inputs[k_key], n, inputs["scale"], shift)
            return inputs
        return Edge(name, apply, tol=FAR_TOL)
    return [edge("every score far below zero", -FAR), edge("every score far above zero", FAR)]


def shifted_softmax_edges() -> list[Edge]:
    """The scores of a softmax slot moved by -FAR and +FAR (after scaling): its every row far below, then
    far above zero."""
    def edge(name, shift):
        def apply(inputs, shape, dtype, gen):
            x = inputs["scores"]
            inputs["scores"] = (x.to(torch.float32) + shift / inputs["scale"]).to(x.dtype)
            return inputs
        return Edge(name, apply, tol=FAR_TOL)
    return [edge("every score far below zero", -FAR), edge("every score far above zero", FAR)]


PAST_NEWEST = 5    # keys after the newest query in the edge below


def _gapped_positions(inputs, shape, dtype, gen):
    """The T positions drawn at random (distinct, sorted) from 0 .. S - 1 - PAST_NEWEST: gaps between them, and
    the last keys after the newest query (keys passed past the prompt's end, as a cache buffer longer than it
    is), visible to no query. A kernel that takes the positions to be the last T of the S keys (S - T + t), or
    to run on from the first (pos[0] + t), instead of reading each one, attends to the wrong keys."""
    pos = inputs["pos"]
    T, S = shape["tokens"], shape["keys"]
    drawn = torch.randperm(S - PAST_NEWEST - 1, generator=gen, device=pos.device)[:T - 1].sort().values
    pos.copy_(torch.cat([drawn, torch.tensor([S - 1 - PAST_NEWEST], device=pos.device)]))
    return inputs


# 7 queries at 7 positions of 0 .. 39 (the newest at 39) over 45 keys; on a GPU 100 of 0 .. 606 over 612
GAPPED_POSITIONS = [
    Edge("positions with gaps, keys past the newest", _gapped_positions, {"tokens": 7, "keys": 45},
         presets=("tiny",)),
    Edge("positions with gaps, keys past the newest", _gapped_positions, {"tokens": 100, "keys": 612},
         presets=("real",))]


def rising_edge(k_key: str, tiny: dict, real: dict) -> list[Edge]:
    """The `rising_scores` edge of a kernel with inputs q, `k_key` (k or k_cache) and scale, at its own
    tiny and real shapes, each of several key blocks (of the interpreter's and of the GPU's tiles)."""
    def apply(inputs, shape, dtype, gen):
        n = shape["length"] if "length" in shape else shape["keys"]
        rising_scores(inputs["q"], inputs[k_key], n, inputs["scale"])
        return inputs
    name = "scores rising to the last key"
    return [Edge(name, apply, tiny, presets=("tiny",)), Edge(name, apply, real, presets=("real",))]


# --- op 5 ------------------------------------------------------------------------------------------
def _qk_inputs(shape, dtype, device, gen):
    return {"q": _randn(gen, dtype, device, shape["tokens"], shape["heads"], shape["head_dim"]),
            "k": _randn(gen, dtype, device, shape["keys"], shape["kv_heads"], shape["head_dim"])}


implement(
    "qk_score", family="attention", function="qk_scores", reference=R.qk_scores,
    make_inputs=_qk_inputs,
    make_out=lambda inp: {"out": inp["q"].new_empty(inp["q"].shape[1], inp["q"].shape[0], inp["k"].shape[0])},
    # 70 keys: two 64-key programs; 74 rows: two 64-row programs; 80 dims: two 64-dim steps
    shapes={"tiny": [{"tokens": 37, "keys": 70, **TINY}, {"tokens": 1, "keys": 45, **TINY},
                     {"tokens": 7, "keys": 19, **ODD}, {"tokens": 3, "keys": 20, **WIDE}],
            "real": [{"tokens": 128, "keys": 128, **REAL}, {"tokens": 1, "keys": 4096, **REAL}]},
    bytes=lambda inp: tensor_bytes(inp["q"], inp["k"])
    + inp["q"].shape[0] * inp["q"].shape[1] * inp["k"].shape[0] * inp["q"].element_size(),
    flops=lambda inp: 2 * inp["q"].numel() * inp["k"].shape[0],
    dims={"out": ("head", "token", "key")},
)


# --- op 20 -----------------------------------------------------------------------------------------
def _mask_reference(pos, kv_len):
    """`causal_mask` as int8: bool compared as int8, since the check poisons outputs with the dtype's
    minimum, which bool lacks."""
    return R.causal_mask(pos, kv_len).to(torch.int8)


implement(
    "causal_mask_gen", family="attention", function="causal_mask",
    reference=_mask_reference,
    torch_impl=R.causal_mask,
    make_inputs=lambda shape, dtype, device, gen: {"pos": _positions(shape, device), "kv_len": shape["keys"]},
    make_out=lambda inp: {"out": torch.empty(inp["pos"].shape[0], inp["kv_len"], dtype=torch.int8,
                                             device=inp["pos"].device)},
    exact=True,
    # 37 tokens: three 16-token programs; 200 keys: two 128-key programs; T != S (a prompt continued
    # after cached tokens): rows S apart, not T
    shapes={"tiny": [{"tokens": 37, "keys": 45}, {"tokens": 1, "keys": 45}, {"tokens": 200, "keys": 200}],
            "real": [{"tokens": 128, "keys": 128}, {"tokens": 1, "keys": 4096}, {"tokens": 100, "keys": 612}]},
    bytes=lambda inp: inp["pos"].shape[0] * (inp["kv_len"] + inp["pos"].element_size()),
    extra={"bench": [0, 1]},         # timed: prefill and decode; the continued prompt is for the check
    edges=GAPPED_POSITIONS,
    dims={"out": ("token", "key")},
)


# --- ops 21 and 6 ----------------------------------------------------------------------------------
# Scaled scores of std 50: exp of the largest overflows fp32 unless the row max is subtracted first.
HUGE_SCORES = scaled("scores", "huge scores", 50.0)
SOFTMAX_DIMS = {"out": ("head", "token", "key")}

implement(
    "scale_softmax", family="attention", function="scaled_softmax", reference=R.scaled_softmax,
    make_inputs=lambda shape, dtype, device, gen: {"scores": _scores(shape, dtype, device, gen),
                                                   "scale": _scale(shape)},
    make_out=lambda inp: {"out": torch.empty_like(inp["scores"])},
    # 3000 keys: two 2048-key steps per lane, so lanes' running sums are rescaled and combined
    shapes={"tiny": [{"tokens": 5, "keys": 21, **TINY}, {"tokens": 1, "keys": 3000, **TINY}],
            "real": [{"tokens": 128, "keys": 128, **REAL}, {"tokens": 1, "keys": 4096, **REAL}]},
    bytes=lambda inp: 2 * tensor_bytes(inp["scores"]),
    edges=[HUGE_SCORES, *shifted_softmax_edges()],
    dims=SOFTMAX_DIMS,
)


def _masked_inputs(shape, dtype, device, gen):
    return {"scores": _scores(shape, dtype, device, gen),
            "mask": R.causal_mask(_positions(shape, device), shape["keys"]), "scale": _scale(shape)}


implement(
    "softmax_mask", family="attention", function="masked_softmax", reference=R.masked_softmax,
    make_inputs=_masked_inputs,
    make_out=lambda inp: {"out": torch.empty_like(inp["scores"])},
    # 2100 keys: two 2048-key steps, the mask partial in the second
    shapes={"tiny": [{"tokens": 5, "keys": 21, **TINY}, {"tokens": 2, "keys": 2100, **TINY}],
            "real": [{"tokens": 128, "keys": 128, **REAL}, {"tokens": 1, "keys": 4096, **REAL}]},
    bytes=lambda inp: 2 * tensor_bytes(inp["scores"]) + tensor_bytes(inp["mask"]),
    edges=[HUGE_SCORES, *shifted_softmax_edges()],
    dims=SOFTMAX_DIMS,
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
    # 70 keys: two 64-key steps; 74 rows: two 64-row programs; decode (2 rows) at 80 dims: three
    # 32-dim programs
    shapes={"tiny": [{"tokens": 37, "keys": 70, **TINY}, {"tokens": 1, "keys": 45, **WIDE},
                     {"tokens": 7, "keys": 19, **ODD}],
            "real": [{"tokens": 128, "keys": 128, **REAL}, {"tokens": 1, "keys": 4096, **REAL}]},
    bytes=lambda inp: tensor_bytes(inp["p"], inp["v"])
    + inp["p"].shape[0] * inp["p"].shape[1] * inp["v"].shape[2] * inp["v"].element_size(),
    flops=lambda inp: 2 * inp["p"].numel() * inp["v"].shape[2],
    dims={"out": ("token", "head", "dim")},
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
    # several 32- and 64-row steps; tiny: the whole cache in use (length = max_len), real: a length that
    # ends inside a 64-row step (the real shapes' lengths are multiples of 64)
    edges=rising_edge("k_cache", {"length": 130, "max_len": 130, **ODD}, {"length": 4000, "max_len": 4096})
    + shifted_edges("k_cache"),
    dims={"out": ("head", "dim")},
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
    # 1 token at position 64 (1,024 on the GPU): the first key of a 64-key block
    shapes={"tiny": [{"tokens": 37, "keys": 37, **TINY}, {"tokens": 1, "keys": 65, **TINY},
                     {"tokens": 7, "keys": 45, **ODD}],
            "real": [{"tokens": 128, "keys": 128, **REAL}, {"tokens": 1, "keys": 1024, **REAL},
                     {"tokens": 1, "keys": 1025, **REAL}]},
    extra={"bench": [0, 1]},         # timed: prefill and decode; the block-start position is for the check
    bytes=lambda inp: tensor_bytes(inp["q"], inp["k"], inp["v"], inp["pos"], inp["q"]),
    # causal: token t does 4 * head_dim FLOPs per head for each of its pos[t] + 1 keys
    flops=lambda inp: 4 * inp["q"].shape[1] * inp["q"].shape[2] * int((inp["pos"].long() + 1).sum()),
    # three 64-key blocks: pass 1 raises its max block after block
    edges=rising_edge("k", {"tokens": 3, "keys": 130, **ODD}, {"tokens": 128, "keys": 1024}) + shifted_edges("k")
    + GAPPED_POSITIONS,
    dims={"out": ("token", "head", "dim")},
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
    # the gate as the model has it: a column slice of a wider projection output, tokens 2 * width apart
    T, W = shape["tokens"], shape["width"]
    return {"o": _randn(gen, dtype, device, T, W), "gate": _randn(gen, dtype, device, T, 2 * W)[:, W:]}


implement(
    "output_gate", family="attention", function="output_gate", reference=R.output_gate,
    make_inputs=_gate_inputs,
    make_out=lambda inp: {"out": torch.empty_like(inp["o"])},
    # 2200 elements: three 1024-element programs, the last partial
    shapes={"tiny": [{"tokens": 11, "width": 200}, {"tokens": 1, "width": 128}],
            "real": [{"tokens": 1, "width": 2048}, {"tokens": 128, "width": 2048}]},
    bytes=lambda inp: 3 * tensor_bytes(inp["o"]),
    edges=[past_exp_overflow("gate")],
    dims={"out": ("token", "column")},
)
