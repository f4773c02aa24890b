"""Slot specs of chapter 21_norm_fusion's fused kernels: residual + RMSNorm, RMSNorm + projection (and the DeltaNet
conv's step after it), gate/up + SwiGLU (with separate or stacked weights), and RMSNorm + gate/up + SwiGLU.

Real shapes are the engine's: one token (decode, the case fusion is for: a launch saved per fusion) and a
128-token prompt. Projections use the merged weights: attention q+gate+k+v 5120 x 1024, DeltaNet
in_proj 8224 x 1024, MLP gate/up 2 x 3584 x 1024. Bytes are what the fused kernel itself must move.
"""
import dataclasses

import torch

from ..reference.fusion import (gate_up_swiglu, gate_up_swiglu_merged, rms_norm_gate_up_swiglu, rms_norm_linear,
                                rms_norm_linear_conv)
from ..reference.quant import quantize
from ..reference.residual import residual_rms_norm
from . import Edge, implement, tensor_bytes
from .common import HUGE_SCALE, PAST_EXP, TINY_SCALE, fp32_stream, norm_edges, sized, zero_rows

CHAPTER = "21_norm_fusion"
PROMPT = 128


def _randn(size, dtype, device, gen, scale=1.0):
    return (scale * torch.randn(size, device=device, generator=gen)).to(dtype)


def _norm_weight(dim, dtype, device, gen):
    # 1 + w with w ~ N(0, 0.1): a kernel that ignores w, or multiplies by w, fails the check
    return _randn(dim, dtype, device, gen, 0.1)


def _out_like_rows(inp, width):
    x = inp["x"]
    return {"out": x.new_empty(x.shape[0], width)}


def _in_place(name, keys, change, shape=None):
    """An edge that changes inputs[key] in place for each key (views stay views: their strides are
    part of what is checked); change(tensor, dtype) does it."""
    def apply(inputs, shape, dtype, gen):
        for key in keys:
            change(inputs[key], dtype)
        return inputs
    return Edge(name, apply, shape=shape or {})


# On a GPU the fused GEMV unrolls walks of up to 8 steps of up to 2048 columns (`fused_gemv_config`), so
# no real shape takes its loop over K: this K does (9 steps of 2048, 65 of 256 with the norm).
LOOPED_K = 16411


def _looped(rows: str):
    return sized("a walk along K long enough to loop", {"M": 1, rows: 40, "K": LOOPED_K})


def _at(shape, edges):
    """`edges` at a smaller variant of the first shape (fewer programs: what they test is per row)."""
    return [dataclasses.replace(e, shape={**e.shape, **shape}) for e in edges]


def _times(scale):
    return lambda x, dtype: x.mul_(scale[dtype] if isinstance(scale, dict) else scale)


def _zero_first(x, dtype):
    x[0] = 0


def _norm_edges_of(keys, zero=_zero_first, zero_name="zero rows"):
    """`norm_edges` for a norm whose input is several tensors (x + residual) or views (q, k heads):
    a zero row (needs eps), mean(x^2) near eps (needs eps and fp32 statistics), squares past fp16's
    range (needs fp32 statistics)."""
    return [_in_place(zero_name, keys, zero), _in_place("tiny scale", keys, _times(TINY_SCALE)),
            _in_place("huge scale", keys, _times(HUGE_SCALE))]


def eight_bit(key: str) -> Edge:
    """inputs[key], a projection weight, quantized to int8 with one fp32 scale a row, passed with its `scale`
    (chapter 31_weight_quant; the reference then computes `quant_linear`): the fast level's decode runs these
    kernels on 8-bit weights, through the W_SCALED code of the learner's walk (one token: the first shape)."""
    def apply(inputs, shape, dtype, gen):
        inputs[key], inputs["scale"], _ = quantize(inputs[key].to(torch.float32), "int8")
        return inputs
    return Edge("8-bit weights (int8, one scale a row)", apply)


# residual + RMSNorm ---------------------------------------------------------------------------------
def _residual_inputs(shape, dtype, device, gen):
    size = (shape["T"], shape["hidden"])
    return {"x": _randn(size, dtype, device, gen), "residual": _randn(size, dtype, device, gen),
            "weight": _norm_weight(shape["hidden"], dtype, device, gen)}


implement(
    "residual_rmsnorm", family="norm_fusion", function="residual_rms_norm", reference=residual_rms_norm,
    make_inputs=_residual_inputs,
    make_out=lambda inp: {"h_out": torch.empty_like(inp["residual"]), "out": torch.empty_like(inp["x"])},
    # tiny: a partial block, one long row, and several short rows per program; each with several
    # programs, the last one partial (a missing program offset or row mask)
    shapes={"tiny": [{"T": 7, "hidden": 130}, {"T": 1, "hidden": 1000}, {"T": 21, "hidden": 64}],
            "real": [{"T": 1, "hidden": 1024}, {"T": PROMPT, "hidden": 1024}]},
    # read x and residual, write h and its normalised copy; the weight once
    bytes=lambda inp: 4 * tensor_bytes(inp["x"]) + tensor_bytes(inp["weight"]),
    flops=lambda inp: 5 * inp["x"].numel(),
    # h = x + residual: both scaled, both zero in a row; the fp16 mode's fp32 stream (h stored in its dtype)
    edges=_norm_edges_of(("x", "residual")) + [fp32_stream()],
    dims={"h_out": ("token", "column"), "out": ("token", "column")},
)


# RMSNorm + projection -------------------------------------------------------------------------------
def _norm_linear_inputs(shape, dtype, device, gen):
    M, N, K = shape["M"], shape["N"], shape["K"]
    return {"x": _randn((M, K), dtype, device, gen), "norm_weight": _norm_weight(K, dtype, device, gen),
            "weight": _randn((N, K), dtype, device, gen, 0.02)}


implement(
    "fused_rmsnorm_linear", family="norm_fusion", function="rms_norm_linear", reference=rms_norm_linear,
    make_inputs=_norm_linear_inputs,
    make_out=lambda inp: _out_like_rows(inp, inp["weight"].shape[0]),
    # tiny: decode (GEMV) with odd sizes and several K steps (unrolled), one with more steps than the GEMV
    # unrolls (its loop over K), then a prompt (GEMM)
    shapes={"tiny": [{"M": 1, "N": 200, "K": 131}, {"M": 1, "N": 40, "K": 600}, {"M": 19, "N": 131, "K": 130}],
            "real": [{"M": 1, "N": 5120, "K": 1024}, {"M": 1, "N": 8224, "K": 1024},
                     {"M": 1, "N": 7168, "K": 1024},
                     {"M": PROMPT, "N": 5120, "K": 1024}, {"M": PROMPT, "N": 8224, "K": 1024}]},
    bytes=lambda inp: (tensor_bytes(inp["x"], inp["norm_weight"], inp["weight"])
                       + inp["x"].shape[0] * inp["weight"].shape[0] * inp["x"].element_size()),
    flops=lambda inp: 2 * inp["x"].numel() * inp["weight"].shape[0],
    edges=_at({"N": 70}, norm_edges("x")) + [eight_bit("weight"), _looped("N")],
    dims={"out": ("token", "column")},
)


def _norm_linear_conv_inputs(shape, dtype, device, gen):
    """One token, the merged DeltaNet in-projection [N, K] whose first C outputs feed the conv [C, KC]
    (taps ~ N(0, 0.3) as chapter 13_conv1d's; a random state: a token in the middle of a sequence)."""
    inputs = _norm_linear_inputs({"M": 1, **shape}, dtype, device, gen)
    C, KC = shape["C"], shape["KC"]
    return {**inputs, "conv_weight": _randn((C, KC), dtype, device, gen, 0.3),
            "conv_state": _randn((C, KC), dtype, device, gen)}


implement(
    "fused_rmsnorm_linear.conv", title="RMSNorm + projection + conv step",
    chapter=CHAPTER, qwen="the DeltaNet in-projection at decode with the depthwise conv's step (and its "
    "state) in the epilogue of the outputs that feed it: [1, 1024] -> [1, 8224]",
    family="norm_fusion", function="rms_norm_linear_conv", reference=rms_norm_linear_conv,
    make_inputs=_norm_linear_conv_inputs, mutated=("conv_state",),
    make_out=lambda inp: _out_like_rows(inp, inp["weight"].shape[0]),
    # tiny: odd sizes, the conv's channels ending inside a program's rows and several K steps
    shapes={"tiny": [{"N": 200, "K": 131, "C": 150, "KC": 4}, {"N": 70, "K": 64, "C": 70, "KC": 2}],
            "real": [{"N": 8224, "K": 1024, "C": 6144, "KC": 4}]},
    # x, the norm's and the projection's weights, the output; the conv's taps, its state read and written
    bytes=lambda inp: (tensor_bytes(inp["x"], inp["norm_weight"], inp["weight"], inp["conv_weight"])
                       + inp["weight"].shape[0] * inp["x"].element_size() + 2 * tensor_bytes(inp["conv_state"])),
    flops=lambda inp: 2 * inp["x"].numel() * inp["weight"].shape[0],
    edges=_at({"N": 70, "C": 70}, [zero_rows("x", name="a zero x (needs eps)"), eight_bit("weight")]),
    dims={"out": ("token", "column"), "conv_state": ("channel", "tap")},
)


# gate/up + SwiGLU -----------------------------------------------------------------------------------
def _gate_up_inputs(shape, dtype, device, gen):
    M, I, K = shape["M"], shape["I"], shape["K"]
    return {"x": _randn((M, K), dtype, device, gen),
            "gate_weight": _randn((I, K), dtype, device, gen, 0.02),
            "up_weight": _randn((I, K), dtype, device, gen, 0.02)}


def _merged_inputs(shape, dtype, device, gen):
    M, I, K = shape["M"], shape["I"], shape["K"]
    return {"x": _randn((M, K), dtype, device, gen),
            "gate_up_weight": _randn((2 * I, K), dtype, device, gen, 0.02)}       # [W_gate; W_up]


def _norm_merged_inputs(shape, dtype, device, gen):
    inputs = _merged_inputs(shape, dtype, device, gen)
    return {"x": inputs["x"], "norm_weight": _norm_weight(shape["K"], dtype, device, gen),
            "gate_up_weight": inputs["gate_up_weight"]}


def _weight_rows(inp) -> int:
    """2 * I: the rows of gate_weight + up_weight, or of the stacked gate_up_weight."""
    return sum(inp[k].shape[0] for k in ("gate_weight", "up_weight", "gate_up_weight") if k in inp)


def _gate_up_bytes(inp):
    # x, the weights (and the norm's), and the [T, I] output: gate and up never reach memory
    x = inp["x"]
    return tensor_bytes(*inp.values()) + x.shape[0] * _weight_rows(inp) // 2 * x.element_size()


def _gate_up_flops(inp):
    return 2 * inp["x"].numel() * _weight_rows(inp)


def _gates_past_exp(inputs, shape, dtype, gen):
    """Token 0's first gates at PAST_EXP (100, -100, 15, -15, ...): each of the first gate rows of the weight set
    to that multiple of token 0's x (normalised, where the kernel normalises it) over its squared length. Past
    88, e^gate overflows fp32: silu written as gate e^gate / (1 + e^gate) is inf / inf there (chapter 10_mlp's
    SwiGLU edge); random x and weights give gates of about 0.2."""
    x = inputs["x"][0].to(torch.float32)
    if "norm_weight" in inputs:     # the gates of the normalised x
        x = x * torch.rsqrt(x.pow(2).mean() + 1e-6) * (1 + inputs["norm_weight"].to(torch.float32))
    weight = inputs["gate_weight" if "gate_weight" in inputs else "gate_up_weight"]     # gate rows first
    n = min(len(PAST_EXP), shape["I"])
    targets = torch.tensor(PAST_EXP[:n], device=x.device)
    weight[:n] = (targets[:, None] * x[None, :] / x.dot(x)).to(weight.dtype)
    return inputs


GATES_PAST_EXP = Edge("gates past exp's overflow", _gates_past_exp)

# tiny: decode with odd sizes (unrolled K steps), decode with more steps than the GEMV unrolls (its loop),
# a prompt (GEMM)
_GATE_UP_SHAPES = {"tiny": [{"M": 1, "I": 200, "K": 131}, {"M": 1, "I": 40, "K": 600},
                            {"M": 19, "I": 100, "K": 130}],
                   "real": [{"M": 1, "I": 3584, "K": 1024}, {"M": PROMPT, "I": 3584, "K": 1024}]}

implement(
    "fused_gate_up_silu", family="norm_fusion", function="gate_up_swiglu", reference=gate_up_swiglu,
    make_inputs=_gate_up_inputs,
    make_out=lambda inp: _out_like_rows(inp, inp["gate_weight"].shape[0]),
    shapes=_GATE_UP_SHAPES, bytes=_gate_up_bytes, flops=_gate_up_flops, dims={"out": ("token", "column")},
    # the GPU table times only the first shape: the stacked variant below times the same kernel at both
    edges=[GATES_PAST_EXP, _looped("I")], extra={"bench": [0]},
)

implement(
    "fused_gate_up_silu.merged", title="gate/up + SwiGLU, stacked weight", chapter=CHAPTER,
    qwen="silu(gate) * up from the engine's stacked [W_gate; W_up] (7168 x 1024) in one kernel",
    family="norm_fusion", function="gate_up_swiglu_merged", reference=gate_up_swiglu_merged,
    make_inputs=_merged_inputs,
    make_out=lambda inp: _out_like_rows(inp, inp["gate_up_weight"].shape[0] // 2),
    shapes=_GATE_UP_SHAPES, bytes=_gate_up_bytes, flops=_gate_up_flops, dims={"out": ("token", "column")},
    edges=[GATES_PAST_EXP, _looped("I")],
)

implement(
    "fused_gate_up_silu.ln2", title="RMSNorm + gate/up + SwiGLU", chapter=CHAPTER,
    qwen="ln2, the stacked gate/up projection and SwiGLU in one kernel: [T, 1024] -> [T, 3584]",
    family="norm_fusion", function="rms_norm_gate_up_swiglu", reference=rms_norm_gate_up_swiglu,
    make_inputs=_norm_merged_inputs,
    make_out=lambda inp: _out_like_rows(inp, inp["gate_up_weight"].shape[0] // 2),
    shapes=_GATE_UP_SHAPES, bytes=_gate_up_bytes, flops=_gate_up_flops,
    edges=_at({"I": 70}, norm_edges("x")) + [GATES_PAST_EXP, eight_bit("gate_up_weight"), _looped("I")],
    dims={"out": ("token", "column")},
)
