"""Slot specs of the projections (chapters 05_projections and 11_lm_head): operators 2, 8, 10, 12 and 16, decode and
prefill.

Shapes are {"M": tokens, "N": output rows of the weight, "K": input features}. The real ones are the
merged weights the engine runs, one GEMV per layer and projection group:
- attention q_proj 4096 (8 heads x [256 query | 256 gate]) + k 512 + v 512 = 5120 x 1024;
- DeltaNet in_proj_qkv 6144 + z 2048 + b 16 + a 16 = 8224 x 1024;
- MLP gate 3584 + up 3584 = 7168 x 1024; down 1024 x 3584; o_proj / out_proj 1024 x 2048;
- the tied LM head 248,320 x 1024.
The tiny ones are odd sizes (masks on every edge), the tiny model's own merged sizes, a decode shape
with K > 2048 (the GEMV's widest step: two steps, the last one partial) and a prefill shape with
M > 64 (two programs along M, the last one partial).
"""
import torch

from ..reference.linear import linear
from ..reference.lm_head import lm_head
from . import Edge, implement
from .common import projection_bytes, projection_flops, projection_inputs, projection_out




def _small_activations(inputs, shape, dtype, gen):
    """x ~ 3e-4 (down_proj's input, silu(gate) * up, is often this small): x * W products are then
    subnormal in fp16, so a kernel that multiplies before casting to fp32 loses their low bits."""
    inputs["x"] = (inputs["x"].to(torch.float32) * 3e-4).to(inputs["x"].dtype)
    return inputs


def _cancelling_halves(inputs, shape, dtype, gen):
    """Columns [h, 2h) of x repeat [0, h) and the weight's are their negation, exactly, and the last K / 32
    columns of x are scaled by 1/8 (exact too): the partial sums are largest at K = h, several times the result
    (a sum of the few last columns). An accumulator in fp16 or bf16 rounds at that largest partial sum: an
    error relative to the result that an ordinary draw, whose sums stay near the result, keeps within the
    tolerance under some Triton versions. An fp32 accumulator's rounding grows by the same factor, hence
    the edge's fp32 tolerance (`CANCEL_TOL`)."""
    x, w = inputs["x"], inputs["weight"]       # fresh from make_inputs: changed in place
    K = x.shape[-1]
    h = (K - max(1, K // 32)) // 2
    x[..., h:2 * h] = x[..., :h]
    w[:, h:2 * h] = -w[:, :h]
    x[..., 2 * h:] *= 0.125
    return inputs


CANCEL_TOL = {torch.float32: 1e-4}


def _projection(name, function, tiny, real, **fields):
    implement(name, family="linear", function=function, make_inputs=projection_inputs, make_out=projection_out,
              bytes=projection_bytes, flops=projection_flops, shapes={"tiny": tiny, "real": real},
              reference=fields.pop("reference", linear),
              edges=[Edge("small activations", _small_activations), Edge("cancelling halves", _cancelling_halves,
                                                                        tol=CANCEL_TOL)],
              dims={"out": ("token", "feature")}, **fields)


def _shape(M, N, K):
    return {"M": M, "N": N, "K": K}


PROMPT = 128   # the prefill length of the course's measurements
LONG_K = _shape(1, 67, 2085)   # decode: BLOCK_K stops at 2048, so the K loop takes a partial second step
LONG_M = _shape(67, 131, 200)  # prefill: BLOCK_M is 64 below M = 256 (N < 4096): two programs along M

# decode: one token, the GEMV
_projection("in_proj", "gemv",
            tiny=[_shape(1, 509, 131), _shape(1, 392, 128), LONG_K],
            real=[_shape(1, 5120, 1024), _shape(1, 8224, 1024)])
_projection("out_proj", "gemv",
            tiny=[_shape(1, 131, 509), _shape(1, 128, 128), LONG_K],
            real=[_shape(1, 1024, 2048)])
_projection("gate_up", "gemv",
            tiny=[_shape(1, 512, 128), _shape(1, 509, 131), LONG_K],
            real=[_shape(1, 7168, 1024)])
_projection("down", "gemv",
            tiny=[_shape(1, 128, 256), _shape(1, 131, 509), LONG_K],
            real=[_shape(1, 1024, 3584)])
_projection("lm_head", "gemv", reference=lm_head,
            tiny=[_shape(1, 512, 128), _shape(1, 509, 131), LONG_K],
            real=[_shape(1, 248320, 1024)])

# prefill: a prompt of M tokens, the GEMM
_projection("in_proj.prefill", "gemm", title="QKV projection (prefill)", op=2, chapter="05_projections",
            qwen="the merged attention / DeltaNet input projections over a whole prompt",
            tiny=[LONG_M, _shape(37, 509, 131), _shape(16, 392, 128)],
            real=[_shape(PROMPT, 5120, 1024), _shape(PROMPT, 8224, 1024)])
_projection("out_proj.prefill", "gemm", title="output projection (prefill)", op=8,
            chapter="09_output_residual", qwen="o_proj / out_proj over a whole prompt",
            tiny=[LONG_M, _shape(37, 131, 509)],
            real=[_shape(PROMPT, 1024, 2048)])
_projection("gate_up.prefill", "gemm", title="MLP gate/up projection (prefill)", op=10,
            chapter="10_mlp", qwen="merged gate + up, 1024 -> 7168, over a whole prompt",
            tiny=[LONG_M, _shape(19, 512, 128)],
            real=[_shape(PROMPT, 7168, 1024)])
_projection("down.prefill", "gemm", title="MLP down projection (prefill)", op=12,
            chapter="10_mlp", qwen="3584 -> 1024 over a whole prompt",
            tiny=[LONG_M, _shape(19, 131, 509)],
            real=[_shape(PROMPT, 1024, 3584)])
