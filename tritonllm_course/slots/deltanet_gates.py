"""Slot specs of chapter 14: the DeltaNet gates and the L2 norm of q and k."""
import math

import torch

from ..reference.deltanet import deltanet_gates, l2norm_qk
from . import implement, tensor_bytes


def _gates_inputs(shape, dtype, device, gen):
    T, HV = shape["T"], shape["HV"]
    # a + dt_bias spans about +-25, past softplus's switch to x at 20; A_log = log U(0.01, 16) as at init
    a = 8.0 * torch.randn(T, HV, dtype=torch.float32, device=device, generator=gen)
    A = 0.01 + (16 - 0.01) * torch.rand(HV, dtype=torch.float32, device=device, generator=gen)
    return {"b": (2.0 * torch.randn(T, HV, device=device, generator=gen)).to(dtype),
            "a": a.to(dtype),
            "A_log": A.log(),                                     # fp32, as in the checkpoint
            "dt_bias": (1.0 + 0.5 * torch.randn(HV, device=device, generator=gen)).to(dtype)}


def _gates_out(inp):
    return {"beta": torch.empty_like(inp["b"]), "g": torch.empty(inp["a"].shape, dtype=torch.float32,
                                                                  device=inp["a"].device)}


implement(
    "deltanet_gates", family="deltanet_gates", function="deltanet_gates", reference=deltanet_gates,
    make_inputs=_gates_inputs, make_out=_gates_out,
    shapes={"tiny": [{"T": 7, "HV": 5}, {"T": 1, "HV": 4}, {"T": 300, "HV": 6}],
            "real": [{"T": 1, "HV": 16}, {"T": 128, "HV": 16}]},
    bytes=lambda inp: tensor_bytes(*inp.values(), *_gates_out(inp).values()),
)


def _qk_inputs(shape, dtype, device, gen):
    """q and k [T, H, D]; with `view`, as the model has them: views of the conv output [T, (2H + HV) * D]."""
    T, H, D = shape["T"], shape["H"], shape["D"]
    if not shape["view"]:
        return {"q": torch.randn(T, H, D, dtype=dtype, device=device, generator=gen),
                "k": torch.randn(T, H, D, dtype=dtype, device=device, generator=gen)}
    conv_out = torch.randn(T, (2 * H + shape["HV"]) * D, dtype=dtype, device=device, generator=gen)
    q, k = conv_out[:, :H * D], conv_out[:, H * D:2 * H * D]
    return {"q": q.view(T, H, D), "k": k.view(T, H, D)}          # strides (C, D, 1)


implement(
    "l2norm_qk", family="deltanet_gates", function="l2norm_qk", reference=l2norm_qk,
    make_inputs=_qk_inputs,
    make_out=lambda inp: {"q_out": torch.empty(inp["q"].shape, dtype=inp["q"].dtype, device=inp["q"].device),
                          "k_out": torch.empty(inp["k"].shape, dtype=inp["k"].dtype, device=inp["k"].device)},
    shapes={"tiny": [{"T": 3, "H": 2, "HV": 4, "D": 24, "view": 1}, {"T": 5, "H": 3, "HV": 3, "D": 40, "view": 0},
                     {"T": 1, "H": 2, "HV": 4, "D": 32, "view": 1}],
            "real": [{"T": 1, "H": 16, "HV": 16, "D": 128, "view": 1},
                     {"T": 128, "H": 16, "HV": 16, "D": 128, "view": 1}]},
    bytes=lambda inp: 2 * sum(math.prod(inp[n].shape) * inp[n].element_size() for n in ("q", "k")),
)
