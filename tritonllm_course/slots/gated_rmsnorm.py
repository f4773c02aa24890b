"""Slot spec of chapter 17_deltanet_layer's gated RMSNorm: norm(o) * w * silu(z) per value head."""
import torch

from ..reference.norms import gated_rms_norm
from . import implement, tensor_bytes
from .common import norm_edges, past_exp_overflow


def _inputs(shape, dtype, device, gen):
    T, HV, D = shape["T"], shape["HV"], shape["D"]
    # w ~ 1 + N(0, 0.1), fp32 as in the checkpoint: a kernel that ignores w, or uses 1 + w, fails
    z = torch.randn(T, HV, D, dtype=dtype, device=device, generator=gen)
    if shape.get("view"):   # z a column slice of the in-projection's output: tokens HV * D + 24 apart
        rows = torch.randn(T, HV * D + 24, dtype=dtype, device=device, generator=gen)
        rows[:, 24:] = z.reshape(T, HV * D)
        z = rows[:, 24:].view(T, HV, D)
    return {"x": torch.randn(T, HV, D, dtype=dtype, device=device, generator=gen), "z": z,
            "weight": 1.0 + 0.1 * torch.randn(D, dtype=torch.float32, device=device, generator=gen)}


implement(
    "gated_rmsnorm", family="gated_rmsnorm", function="gated_rms_norm", reference=gated_rms_norm,
    make_inputs=_inputs, make_out=lambda inp: {"out": torch.empty_like(inp["x"])},
    # 21 rows of 40 (16 a program) and 12 rows of 128 (8 a program): two programs each, the last partial
    shapes={"tiny": [{"T": 7, "HV": 3, "D": 40, "view": 1}, {"T": 3, "HV": 4, "D": 128, "view": 1},
                     {"T": 1, "HV": 4, "D": 32}],
            "real": [{"T": 1, "HV": 16, "D": 128}, {"T": 128, "HV": 16, "D": 128, "view": 1}]},
    # zero rows need eps (0 / rms(0) is NaN), tiny ones feel it, huge ones overflow fp16 squares
    # and gates past exp's overflow: silu(z) = z sigmoid(z) must stay finite
    edges=norm_edges("x") + [past_exp_overflow("z")],
    dims={"out": ("token", "value head", "column")},
    bytes=lambda inp: 3 * tensor_bytes(inp["x"]) + tensor_bytes(inp["weight"]),
)
