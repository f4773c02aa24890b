"""Slot spec of chapter 01_triton_basics's vector add."""
import torch

from ..reference.basics import vector_add
from . import implement, tensor_bytes


def _inputs(shape, dtype, device, gen):
    n = shape["n"]
    return {"x": torch.randn(n, dtype=dtype, device=device, generator=gen),
            "y": torch.randn(n, dtype=dtype, device=device, generator=gen)}


implement(
    "vector_add", family="vector_add", function="add",
    reference=vector_add,
    make_inputs=_inputs,
    make_out=lambda inp: {"out": torch.empty_like(inp["x"])},
    shapes={"tiny": [{"n": 1000}, {"n": 4097}], "real": [{"n": 2**24}, {"n": 2**24 + 7}, {"n": 1000}]},
    bytes=lambda inp: 3 * tensor_bytes(inp["x"]),
)
