"""Slot spec of the ladder's naive projection (chapter 29_naive_to_fast): one token, one program per output, the
weight at whatever strides it has.

The same math as the decode projections (`reference.linear`), checked at both layouts the ladder measures: the
row-major weight ([N, K], stride_k = 1) of the shapes, and as an edge the transposed storage the source article's
engine keeps ([K, N] viewed as [N, K], strides (1, N)): a kernel that assumes stride_k = 1 reads the wrong
elements there and nowhere else.
"""

from ..reference.linear import linear
from . import Edge, implement
from .common import projection_bytes, projection_flops, projection_inputs, projection_out


def _transposed(inputs, shape, dtype, gen):
    """The weight's values stored as [K, N] and viewed as [N, K] (strides (1, N)): the article's layout."""
    inputs["weight"] = inputs["weight"].t().contiguous().t()                    # [N, K] view of a [K, N] storage
    return inputs


def _shape(M, N, K):
    return {"M": M, "N": N, "K": K}


implement("naive_gemv", family="naive_gemv", function="per_output_linear",
          title="naive projection (one program per output)", chapter="29_naive_to_fast",
          qwen="the ladder's first step: a decode projection at either layout", reference=linear,
          make_inputs=projection_inputs, make_out=projection_out, bytes=projection_bytes, flops=projection_flops,
          edges=[Edge("transposed storage", _transposed)], dims={"out": ("token", "feature")},
          shapes={"tiny": [_shape(1, 131, 509), _shape(1, 67, 2085), _shape(1, 509, 131)],
                  "real": [_shape(1, 1024, 2048), _shape(1, 5120, 1024)]})
