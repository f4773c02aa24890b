"""Slot specs of chapter 28_compilers's GEMM with a fused GELU epilogue: the erf form and the tanh form.

Shapes are {"M": tokens, "N": output features, "K": input features}. The real ones are the MLP's up
projection of Qwen3.5-0.8B's width, 1024 -> 3584, for one token (the GEMV with the epilogue) and a prompt of
128 (the GEMM). The tiny ones: 67 x 509 x 131 gives the interpreter's GEMM 2 x 8 programs, the last of each
axis partial, and K = 131 three steps of 64, the last partial; 37 x 131 x 200 one partial program along M
and four K steps; one token of 509 x 131 takes the GEMV.

The weight is N(0, 1/K), so that the pre-activations are N(0, 1): GELU bends there. With the projections'
usual 0.02 at these small K they would sit near 0, where GELU is x / 2 and a wrong constant in either form
would hide. The edges: pre-activations of scale 30 (tanh saturates; (e^2u - 1) / (e^2u + 1) is NaN past
x ~ 10), and rows of x that are all zero (GELU(0) = 0: every element must still be written).
"""
import torch
import torch.nn.functional as F

from ..reference.gelu import gelu_linear
from . import Edge, implement
from .common import projection_bytes, projection_flops, projection_out


def _inputs(approximate):
    def make(shape, dtype, device, gen):
        M, N, K = shape["M"], shape["N"], shape["K"]
        return {"x": torch.randn(M, K, dtype=dtype, device=device, generator=gen),
                "weight": (torch.randn(N, K, device=device, generator=gen) / K ** 0.5).to(dtype),
                "approximate": approximate}
    return make


def _unfused(x, weight, approximate="none"):
    """What eager PyTorch runs: cuBLAS, then F.gelu on its rounded output (two kernels)."""
    return F.gelu(F.linear(x, weight), approximate=approximate)




def _large(inputs, shape, dtype, gen):
    """Pre-activations ~ N(0, 30^2): a third past x = 10, where the tanh form's exponential overflows."""
    inputs["weight"] = (inputs["weight"].to(torch.float32) * 30).to(dtype)
    return inputs


def _zero_rows(inputs, shape, dtype, gen):
    """Every other row of x zero: those outputs are GELU(0) = 0, and must be stored all the same."""
    inputs["x"][::2] = 0
    return inputs


def _shape(M, N, K):
    return {"M": M, "N": N, "K": K}


_COMMON = dict(family="gemm_epilogue", function="gelu_linear", reference=gelu_linear, torch_impl=_unfused,
               make_out=projection_out, bytes=projection_bytes, flops=projection_flops, chapter="28_compilers",
               shapes={"tiny": [_shape(67, 509, 131), _shape(37, 131, 200), _shape(1, 509, 131)],
                       "real": [_shape(128, 3584, 1024), _shape(1, 3584, 1024)]},
               edges=[Edge("large pre-activations", _large), Edge("zero rows", _zero_rows)],
               dims={"out": ("token", "feature")})

implement("gemm_gelu", make_inputs=_inputs("none"), **_COMMON)
implement("gemm_gelu.tanh", make_inputs=_inputs("tanh"), title="GEMM + GELU epilogue (tanh form)",
          qwen="the tanh approximation of GELU in the epilogue, written with the sigmoid", **_COMMON)
