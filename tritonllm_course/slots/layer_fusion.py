"""Slot specs of chapter 22_layer_fusion's fused kernels: projection + residual add, q/k norm + RoPE + KV cache write,
the DeltaNet gates inside the recurrent (and the chunked) delta rule, gated RMSNorm + out_proj + residual.

Real shapes are the engine's at its level "fast": one token (decode) and, where the kernel also runs at
prefill, a 128-token prompt. Bytes are what the fused kernel itself must move.
"""
import math

import torch

from ..reference.fusion import (gated_delta_rule_chunked_gates, gated_delta_rule_recurrent_gates,
                                gated_norm_linear_residual, gated_norm_linear_residual_eager, linear_residual,
                                linear_residual_eager, qk_norm_rope_cache)
from ..reference.rope import rope_cache
from . import Edge, implement, tensor_bytes
from .common import HUGE_SCALE, TINY_SCALE, fp32_stream, past_exp_overflow, scaled, sized
from .delta_rule import make_inputs as delta_rule_inputs, make_out as delta_rule_out
from .norm_fusion import PROMPT, _at, _in_place, _norm_edges_of, _norm_weight, _randn, eight_bit

CHAPTER = "22_layer_fusion"


def _zero_first_head(x, dtype):
    x[0, 0] = 0


# projection + residual add ----------------------------------------------------------------------------
def _linear_residual_inputs(shape, dtype, device, gen):
    M, N, K = shape["M"], shape["N"], shape["K"]
    return {"x": _randn((M, K), dtype, device, gen), "weight": _randn((N, K), dtype, device, gen, 0.02),
            "residual": _randn((M, N), dtype, device, gen)}


implement(
    "fused_linear_residual", family="layer_fusion", function="linear_residual", reference=linear_residual,
    torch_impl=linear_residual_eager, make_inputs=_linear_residual_inputs,
    make_out=lambda inp: {"out": torch.empty_like(inp["residual"])},
    # tiny: decode (GEMV) with odd sizes and several K steps, then a prompt (GEMM)
    shapes={"tiny": [{"M": 1, "N": 131, "K": 200}, {"M": 1, "N": 64, "K": 130}, {"M": 19, "N": 131, "K": 130}],
            "real": [{"M": 1, "N": 1024, "K": 2048}, {"M": 1, "N": 1024, "K": 3584},
                     {"M": PROMPT, "N": 1024, "K": 2048}, {"M": PROMPT, "N": 1024, "K": 3584}]},
    # x, the weight, the stream read and written
    bytes=lambda inp: tensor_bytes(inp["x"], inp["weight"]) + 2 * tensor_bytes(inp["residual"]),
    flops=lambda inp: 2 * inp["x"].numel() * inp["weight"].shape[0],
    edges=[eight_bit("weight"), fp32_stream()],      # the fp16 mode's fp32 stream: the sum stored in its dtype
    dims={"out": ("token", "column")},
)


# q/k norm + RoPE + KV cache write ----------------------------------------------------------------------
def _prologue_inputs(shape, dtype, device, gen):
    """q, k, v as views of one projection output [T, H * 2D + 2 KV * D], Qwen3.5's merged attention
    projection: per query head [query | gate], then k, then v. Each head contiguous, tokens strided, and
    q's heads 2D apart (a kernel that assumes D, or packed tokens, reads the wrong rows). Caches full of
    old rows, positions after a random start."""
    T, H, KV, D, R, L = (shape[n] for n in ("T", "heads", "kv_heads", "head_dim", "rotary_dim", "max_len"))
    qkv = _randn((T, (2 * H + 2 * KV) * D), dtype, device, gen)
    qg, k, v = qkv.split([2 * H * D, KV * D, KV * D], dim=-1)
    cos, sin = rope_cache(L, R, dtype=dtype, device=device)
    start = int(torch.randint(0, L - T + 1, (1,), generator=gen, device=device))
    return {"q": qg.view(T, H, 2 * D)[:, :, :D], "k": k.view(T, KV, D), "v": v.view(T, KV, D),  # [T, heads, D]
            "q_weight": _norm_weight(D, dtype, device, gen), "k_weight": _norm_weight(D, dtype, device, gen),
            "cos": cos, "sin": sin, "pos": torch.arange(start, start + T, dtype=torch.int32, device=device),
            "k_cache": _randn((L, KV, D), dtype, device, gen), "v_cache": _randn((L, KV, D), dtype, device, gen)}


def _last_positions(inputs, shape, dtype, gen):
    """The T tokens at the cache's (and the tables') last positions: a write bounded one short, or a
    table row read one off, shows here."""
    L, T = shape["max_len"], shape["T"]
    inputs["pos"] = torch.arange(L - T, L, dtype=inputs["pos"].dtype, device=inputs["pos"].device)
    return inputs


implement(
    "qk_norm_rope_cache", family="layer_fusion", function="qk_norm_rope_cache", reference=qk_norm_rope_cache,
    make_inputs=_prologue_inputs, mutated=("k_cache", "v_cache"),
    make_out=lambda inp: {"out": torch.empty(inp["q"].shape, dtype=inp["q"].dtype, device=inp["q"].device)},
    # tiny: a partial rotary part, GQA, odd head_dim; then the real attention layer's heads
    shapes={"tiny": [{"T": 1, "heads": 4, "kv_heads": 2, "head_dim": 32, "rotary_dim": 8, "max_len": 19},
                     {"T": 4, "heads": 3, "kv_heads": 1, "head_dim": 24, "rotary_dim": 24, "max_len": 11}],
            "real": [{"T": 1, "heads": 8, "kv_heads": 2, "head_dim": 256, "rotary_dim": 64, "max_len": 4096},
                     {"T": PROMPT, "heads": 8, "kv_heads": 2, "head_dim": 256, "rotary_dim": 64,
                      "max_len": 4096}]},
    # the q, k, v rows read, q written, k and v written into the cache; the weights and table rows
    bytes=lambda inp: (2 * tensor_bytes(inp["q"]) + 3 * tensor_bytes(inp["k"]) + tensor_bytes(inp["v"])
                       + tensor_bytes(inp["q_weight"], inp["k_weight"])),
    # q and k changed in place: still views of one projection row per token
    edges=_norm_edges_of(("q", "k"), _zero_first_head, "a zero q head and k head")
    + [Edge("the cache's last positions", _last_positions),
       # the lowest frequencies turn by about 1e-6 radians a position: a rotation that leaves its last pair
       # alone is exact at small positions, wrong at the end of a long cache
       # (on the CPU with narrow heads: the whole cache is compared, and the interpreter copies it)
       Edge("the last positions of a 32,768-row cache", _last_positions, presets=("tiny",),
            shape={"heads": 2, "kv_heads": 1, "head_dim": 8, "rotary_dim": 8, "max_len": 32768}),
       Edge("the last positions of a 32,768-row cache", _last_positions, shape={"max_len": 32768},
            presets=("real",))],
    dims={"out": ("token", "head", "column"), "k_cache": ("position", "kv head", "column"),
          "v_cache": ("position", "kv head", "column")},
)


# DeltaNet gates + recurrent delta rule --------------------------------------------------------------------
_DELTA_DIMS = {"out": ("token", "value head", "column"), "final_state": ("value head", "key dim", "value dim")}


def _recurrent_gates_inputs(shape, dtype, device, gen):
    """The delta rule's inputs (chapter 15_delta_rule's spec) with the gates' raw inputs instead of g and beta:
    a, b ~ N(0, 1) as views of one projection row per token, A_log = log U(1, 16) as Qwen initialises it,
    dt_bias ~ N(-4, 1): decays g = -exp(A_log) softplus(a + dt_bias) of about e^-0.15 per token (most
    between e^-0.01 and e^-1), so the state carries over tens of tokens and what one chunk hands the next
    matters. (With dt_bias ~ N(0, 1) the decays are about e^-8: each token all but erases the state, and a
    chunk's cumulative log-decay reaches -300, where fp32 loses the differences gamma_i - gamma_j.)"""
    inputs = delta_rule_inputs(shape, dtype, device, gen)
    T, HV = inputs["g"].shape
    ab = _randn((T, 2 * HV + 3), dtype, device, gen)                   # [T, ...]: a token-strided layout
    del inputs["g"], inputs["beta"]
    if shape.get("qk_norm"):    # q and k as the conv leaves them: not unit length, normalised in the kernel,
        q, k = inputs["q"].mul_(3), inputs["k"].mul_(0.5)   # (in place: views stay views), and one head of
        q[0, 0], k[-1, -1] = 0, 0                             # each zero (only the norm's eps maps it to 0)
        inputs["qk_norm"] = True
    if shape.get("norm"):       # the gated RMSNorm after it: z as a view of a wider row per token
        HV, DV = inputs["v"].shape[1:]
        z = _randn((T, HV * DV + 5), dtype, device, gen)[:, :HV * DV].view(T, HV, DV)
        inputs.update(z=z, norm_weight=1.0 + _norm_weight(DV, dtype, device, gen))
    return {**inputs, "a": ab[:, :HV], "b": ab[:, HV:2 * HV],
            "A_log": torch.log(torch.empty(HV, device=device).uniform_(1, 16, generator=gen)),
            "dt_bias": torch.randn(HV, device=device, generator=gen) - 4.0}


implement(
    "gated_delta_recurrent_gates", family="layer_fusion", function="gated_delta_rule_recurrent_gates",
    reference=gated_delta_rule_recurrent_gates, make_inputs=_recurrent_gates_inputs, make_out=delta_rule_out,
    # qk_norm: q and k straight from the conv (rms_norm_linear_conv), L2-normalised inside the kernel.
    # tiny (the interpreter's cost is per program and token: a few of each): decode; several tokens with
    # qk_norm (two key heads: one zero head leaves the other's tokens in play); from no state, odd head
    # dims. GQA but in the second; with several tokens q, k, v token-strided views (views: as the model
    # slices them from the conv's output), a and b always
    shapes={"tiny": [{"T": 1, "H": 2, "HV": 4, "DK": 32, "DV": 24},
                     {"T": 2, "H": 2, "HV": 2, "DK": 24, "DV": 24, "qk_norm": True, "views": True},
                     {"T": 3, "H": 1, "HV": 2, "DK": 24, "DV": 40, "state": False, "views": True}],
            "real": [{"T": 1, "H": 16, "HV": 16, "DK": 128, "DV": 128},
                     {"T": 1, "H": 16, "HV": 16, "DK": 128, "DV": 128, "qk_norm": True}]},
    # q, k, v, a, b read once, the state read and written once, o written
    bytes=lambda inp: (tensor_bytes(inp["q"], inp["k"], inp["v"], inp["a"], inp["b"], inp["initial_state"])
                       + tensor_bytes(inp["v"]) + inp["v"].shape[1] * inp["k"].shape[-1] * inp["v"].shape[-1] * 4),
    # a decode step: one token's decay e^-1600 (the state erased) or none
    edges=[past_exp_overflow("b", "a", offsets={"a": "dt_bias"})],
    dims=_DELTA_DIMS,
)


def _strong_decays(inputs, shape, dtype, gen):
    """Value head 0 forgets fast: A = 8 and dt_bias = 1, so g = -8 softplus(a + 1), about -10 a token (trained
    heads may decay so), and a chunk's log-decay from its start passes -88 about its eighth token: a kernel that
    factors exp(gamma_i - gamma_j) into exp(gamma_i) exp(-gamma_j), or masks the unclamped exp(gamma_i - gamma_j)
    of the pairs i < j by a product (inf * 0), returns NaN (chapter 16_delta_rule_chunked's edge). fp32 keeps a
    log-decay of -200 to about 1.5e-5 (the chunk's sum and its cumulative sums round apart): the newest write
    to the state is off by up to that much, hence STRONG_TOL."""
    inputs["A_log"][0] = math.log(8.0)
    inputs["dt_bias"][0] = 1.0
    return inputs


STRONG_TOL = {torch.float32: 5e-5}


implement(
    "gated_delta_chunked.gates", title="DeltaNet gates + chunked delta rule (+ gated RMSNorm)", chapter=CHAPTER,
    qwen="prefill: beta and g computed in the chunked rule's first kernel from a and b, g kept for the "
    "other two; the gated RMSNorm in the last one's epilogue (two launches fewer per layer)",
    family="delta_rule", function="gated_delta_rule_chunked_gates",
    reference=gated_delta_rule_chunked_gates, make_inputs=_recurrent_gates_inputs, make_out=delta_rule_out,
    dims=_DELTA_DIMS,
    # tiny (chunks of 16: chunk_size_for; the interpreter's cost is per chunk and value head): two chunks,
    # the second partial, after an initial state, q, k, v token-strided views (as the model slices them);
    # one partial chunk without a state, odd head dims and the gated norm after it (norm: what the engine
    # runs); both GQA; then chunks of 64 (kernel 1 split in two, as from 512 tokens), the second partial, with
    # the norm. real: the engine's prompt of 128 and an odd length (chunks of 64, the last partial)
    shapes={"tiny": [{"T": 21, "H": 1, "HV": 2, "DK": 32, "DV": 24, "views": True},
                     {"T": 13, "H": 1, "HV": 2, "DK": 24, "DV": 40, "state": False, "norm": True},
                     {"T": 70, "H": 1, "HV": 2, "DK": 24, "DV": 24, "views": True, "norm": True, "chunk": 64}],
            "real": [{"T": 128, "H": 16, "HV": 16, "DK": 128, "DV": 128, "norm": True},
                     {"T": 999, "H": 16, "HV": 16, "DK": 128, "DV": 128}]},
    # q, k, v, a, b read once, the state read and written once, o written (the workspaces are extra)
    bytes=lambda inp: (tensor_bytes(inp["q"], inp["k"], inp["v"], inp["a"], inp["b"], inp["initial_state"])
                       + tensor_bytes(inp["v"]) + inp["v"].shape[1] * inp["k"].shape[-1] * inp["v"].shape[-1] * 4),
    # max-autotune tunes each product of the torch reference's loop over chunks: at T = 128 the row ran past
    # 430 s<!-- unsaved: 2026-12-06 --> on an H100 (the kernel table) without finishing
    edges=[Edge("strong decays in head 0", _strong_decays, tol=STRONG_TOL)],
    extra={"max_autotune_max": {"T": 64},
           "max_autotune_why": "the compile of the reference's loop over chunks ran past 430 s (H100, 2026-12-06)"},
)


# gated RMSNorm + out_proj + residual add ------------------------------------------------------------------
def _gated_out_inputs(shape, dtype, device, gen):
    T, HV, DV, N = shape["T"], shape["heads"], shape["DV"], shape["N"]
    xz = _randn((T, 2 * HV * DV + 5), dtype, device, gen)          # z as a view of a wider row per token
    return {"x": _randn((T, HV, DV), dtype, device, gen), "z": xz[:, :HV * DV].view(T, HV, DV),
            "norm_weight": 1.0 + _norm_weight(DV, dtype, device, gen),        # a plain scale around 1
            "weight": _randn((N, HV * DV), dtype, device, gen, 0.02), "residual": _randn((T, N), dtype, device, gen)}


implement(
    "gated_norm_linear_residual", family="layer_fusion", function="gated_norm_linear_residual",
    reference=gated_norm_linear_residual, torch_impl=gated_norm_linear_residual_eager, make_inputs=_gated_out_inputs,
    make_out=lambda inp: {"out": torch.empty_like(inp["residual"])},
    # tiny: one token with heads split over two K tiles, then several tokens (a grid row each)
    shapes={"tiny": [{"T": 1, "heads": 4, "DV": 32, "N": 131}, {"T": 3, "heads": 3, "DV": 16, "N": 70}],
            "real": [{"T": 1, "heads": 16, "DV": 128, "N": 1024}]},
    bytes=lambda inp: (tensor_bytes(inp["x"], inp["z"], inp["norm_weight"], inp["weight"])
                       + 2 * tensor_bytes(inp["residual"])),
    flops=lambda inp: 2 * inp["x"].numel() * inp["weight"].shape[0],
    # a zero head needs eps; tiny and huge x: mean(x^2) near eps, squares past fp16's range; gates past exp's
    # overflow: silu(z) = z sigmoid(z) must stay finite (chapter 17_deltanet_layer's gated norm's edge)
    edges=_at({"N": 70}, [_in_place("a zero head", ("x",), lambda x, dtype: x[0, 1].zero_()),
                          scaled("x", "tiny scale", TINY_SCALE), scaled("x", "huge scale", HUGE_SCALE),
                          past_exp_overflow("z"), eight_bit("weight"), fp32_stream()])
    # on a GPU the real K (2048) is one tile of the walk: 20 heads make two
    + [sized("a walk along K of two tiles", {"heads": 20, "N": 40})],
    dims={"out": ("token", "column")},
)
