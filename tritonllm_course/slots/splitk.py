"""Slot specs of chapter 24_split_k's split-K GEMV: the deterministic two-stage reduction and the atomic one.

Shapes are {"M": 1, "N": output rows, "K": input features}, as for the projections (slots/linear.py, whose
inputs, output and byte count these reuse). The real ones are the decode GEMVs where split-K is meant to
pay, the narrow ones (o_proj / out_proj 1024 x 2048, MLP down 1024 x 3584), and the LM head
248,320 x 1024, where it is not (`choose_split` gives 1 piece there: the two-stage kernel runs with one
piece, and its second stage is a cast). The tiny ones are odd sizes under the interpreter: 131 x 509, five
row blocks (the last partial) and 2 pieces of 4 steps (the last piece, and its last step, partial); 5 x 333,
6 pieces of one step (not a power of two: the reduction's mask over pieces; fewer steps than the pieces
`choose_split` wants).

The atomic kernel is given its accumulator, zeros, and the check expects zeros in it afterwards: the
buffer a CUDA graph keeps from call to call must be ready for the next call.
"""
import torch

from ..reference.linear import linear
from . import implement
from .common import projection_bytes, projection_flops, projection_inputs, projection_out


def _shape(N, K):
    return {"M": 1, "N": N, "K": K}


_COMMON = dict(family="splitk", reference=linear, make_inputs=projection_inputs, make_out=projection_out,
               bytes=projection_bytes, flops=projection_flops, chapter="24_split_k")


def _atomic_inputs(shape, dtype, device, gen):
    inputs = projection_inputs(shape, dtype, device, gen)
    return {**inputs, "acc": torch.zeros(shape["N"], dtype=torch.float32, device=device)}


def _linear_and_cleared(x, weight, acc):
    """y = x @ W.T, and the accumulator back to zeros."""
    return linear(x, weight), torch.zeros_like(acc)


def _linear_only(x, weight, acc=None):
    return linear(x, weight)


_DIMS = {"out": ("token", "row"), "acc": ("row",)}

implement("splitk_gemv", function="splitk_gemv", dims=_DIMS,
          shapes={"tiny": [_shape(5, 333), _shape(131, 509)],
                  "real": [_shape(1024, 2048), _shape(1024, 3584), _shape(248320, 1024)]},
          **_COMMON)
implement("splitk_gemv.atomic", function="splitk_gemv_atomic", title="split-K GEMV (atomic reduction)",
          qwen="the narrow decode GEMVs, pieces added with fp32 atomics (not bit-reproducible)",
          shapes={"tiny": [_shape(131, 509), _shape(5, 333)],
                  "real": [_shape(1024, 2048), _shape(1024, 3584)]},
          **{**_COMMON, "reference": _linear_and_cleared, "torch_impl": _linear_only,
             "make_inputs": _atomic_inputs, "mutated": ("acc",), "dims": _DIMS})
