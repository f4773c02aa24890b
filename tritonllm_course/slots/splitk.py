"""Slot specs of chapter 23's split-K GEMV: the deterministic two-stage reduction and the atomic one.

Shapes are {"M": 1, "N": output rows, "K": input features}, as for the projections (slots/linear.py, whose
inputs, output and byte count these reuse). The real ones are the decode GEMVs where split-K is meant to
pay, the narrow ones (o_proj / out_proj 1024 x 2048, MLP down 1024 x 3584), and the LM head
248,320 x 1024, where it is not (`choose_split` gives 1 piece there: the two-stage kernel runs with one
piece, and its second stage is a cast). The tiny ones are odd sizes that split into 2 to 8 pieces under
the interpreter, with a partial last piece and a partial last row block.
"""
from ..reference.linear import linear
from . import implement
from .linear import _bytes, _flops, _inputs, _out


def _shape(N, K):
    return {"M": 1, "N": N, "K": K}


_COMMON = dict(family="splitk", reference=linear, make_inputs=_inputs, make_out=_out, bytes=_bytes,
               flops=_flops, chapter="23_split_k")

implement("splitk_gemv", function="splitk_gemv",
          shapes={"tiny": [_shape(131, 509), _shape(37, 1000)],
                  "real": [_shape(1024, 2048), _shape(1024, 3584), _shape(248320, 1024)]},
          **_COMMON)
implement("splitk_gemv.atomic", function="splitk_gemv_atomic", title="split-K GEMV (atomic reduction)",
          qwen="the narrow decode GEMVs, pieces added with fp32 atomics (not bit-reproducible)",
          shapes={"tiny": [_shape(131, 509), _shape(5, 333)],
                  "real": [_shape(1024, 2048), _shape(1024, 3584)]},
          **_COMMON)
