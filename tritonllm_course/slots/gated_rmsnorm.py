"""Slot spec of chapter 17's gated RMSNorm: norm(o) * w * silu(z) per value head."""
import torch

from ..reference.norms import gated_rms_norm
from . import implement, tensor_bytes


def _inputs(shape, dtype, device, gen):
    T, HV, D = shape["T"], shape["HV"], shape["D"]
    # w ~ 1 + N(0, 0.1), fp32 as in the checkpoint: a kernel that ignores w, or uses 1 + w, fails
    return {"x": torch.randn(T, HV, D, dtype=dtype, device=device, generator=gen),
            "z": torch.randn(T, HV, D, dtype=dtype, device=device, generator=gen),
            "weight": 1.0 + 0.1 * torch.randn(D, dtype=torch.float32, device=device, generator=gen)}


implement(
    "gated_rmsnorm", family="gated_rmsnorm", function="gated_rms_norm", reference=gated_rms_norm,
    make_inputs=_inputs, make_out=lambda inp: {"out": torch.empty_like(inp["x"])},
    shapes={"tiny": [{"T": 3, "HV": 4, "D": 32}, {"T": 5, "HV": 3, "D": 40}, {"T": 1, "HV": 4, "D": 128}],
            "real": [{"T": 1, "HV": 16, "D": 128}, {"T": 128, "HV": 16, "D": 128}]},
    bytes=lambda inp: 3 * tensor_bytes(inp["x"]) + tensor_bytes(inp["weight"]),
)
