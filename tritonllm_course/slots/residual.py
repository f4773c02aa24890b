"""Slot specs of the residual adds (operators 9 and 13): one kernel, two places in every layer."""
import torch

from . import implement, tensor_bytes
from .common import fp32_stream
from ..reference import residual_add


def _inputs(shape, dtype, device, gen):
    size = (shape["T"], shape["hidden"])
    return {"x": torch.randn(size, generator=gen, device=device).to(dtype),          # the sublayer's output
            "residual": torch.randn(size, generator=gen, device=device).to(dtype)}


for _name in ("attn_residual", "mlp_residual"):
    implement(
        _name, family="residual", function="residual_add",
        reference=residual_add,
        make_inputs=_inputs,
        make_out=lambda inp: {"out": torch.empty_like(inp["residual"])},
        # decode (T = 1) and a 128-token prefill; tiny: odd sizes, several blocks of 1024 (a partial last)
        shapes={"tiny": [{"T": 3, "hidden": 1030}, {"T": 1, "hidden": 1000}],
                "real": [{"T": 1, "hidden": 1024}, {"T": 128, "hidden": 1024}]},
        bytes=lambda inp: 3 * tensor_bytes(inp["x"]),                               # read x, residual; write
        flops=lambda inp: inp["x"].numel(),
        edges=[fp32_stream()],
        dims={"out": ("token", "column")},
    )
