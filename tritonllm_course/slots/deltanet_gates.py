"""Slot specs of chapter 14_gates_l2norm: the DeltaNet gates and the L2 norm of q and k."""
import math

import torch

from ..reference.deltanet import deltanet_gates, l2norm_qk
from . import implement, tensor_bytes
from .common import norm_edges, past_exp_overflow


def _columns(x, left, right, gen):
    """x [T, HV] as a column slice of wider rows [T, left + HV + right] (the other columns random), as b
    and a are slices of the in-projection's output: tokens at a stride other than HV."""
    T, HV = x.shape
    rows = torch.randn(T, left + HV + right, device=x.device, generator=gen).to(x.dtype)
    rows[:, left:left + HV] = x
    return rows[:, left:left + HV]


def _gates_inputs(shape, dtype, device, gen):
    T, HV = shape["T"], shape["HV"]
    # a + dt_bias spans about +-25, past softplus's switch to x at 20; A_log = log U(0.01, 16) as at init
    a = 8.0 * torch.randn(T, HV, dtype=torch.float32, device=device, generator=gen)
    A = 0.01 + (16 - 0.01) * torch.rand(HV, dtype=torch.float32, device=device, generator=gen)
    b, a = (2.0 * torch.randn(T, HV, device=device, generator=gen)).to(dtype), a.to(dtype)
    if shape.get("view"):   # token strides 2 HV + 3 and 2 HV: packed rows, or b read at a's stride, go wrong
        b, a = _columns(b, 1, HV + 2, gen), _columns(a, HV, 0, gen)
    return {"b": b, "a": a,
            "A_log": A.log(),                                     # fp32, as in the checkpoint
            "dt_bias": (1.0 + 0.5 * torch.randn(HV, device=device, generator=gen)).to(dtype)}


def _gates_out(inp):
    return {"beta": torch.empty_like(inp["b"]), "g": torch.empty(inp["a"].shape, dtype=torch.float32,
                                                                  device=inp["a"].device)}


implement(
    "deltanet_gates", family="deltanet_gates", function="deltanet_gates", reference=deltanet_gates,
    make_inputs=_gates_inputs, make_out=_gates_out,
    # T = 300: two programs of 1024 elements, the last partial
    shapes={"tiny": [{"T": 7, "HV": 5, "view": 1}, {"T": 1, "HV": 4}, {"T": 300, "HV": 6, "view": 1}],
            "real": [{"T": 1, "HV": 16}, {"T": 128, "HV": 16, "view": 1}]},
    bytes=lambda inp: tensor_bytes(*inp.values(), *_gates_out(inp).values()),
    edges=[past_exp_overflow("b", "a", offsets={"a": "dt_bias"})],
    dims={"beta": ("token", "value head"), "g": ("token", "value head")},
)


def _qk_inputs(shape, dtype, device, gen):
    """q and k [T, H, D]; with `view` 1, as the model has them: views of the conv output [T, (2H + HV) * D];
    with `view` 2, heads D + 8 apart (a head stride other than D: only the last dim is contiguous)."""
    T, H, D = shape["T"], shape["H"], shape["D"]
    if not shape["view"]:
        return {"q": torch.randn(T, H, D, dtype=dtype, device=device, generator=gen),
                "k": torch.randn(T, H, D, dtype=dtype, device=device, generator=gen)}
    if shape["view"] == 2:
        return {name: torch.randn(T, H, D + 8, dtype=dtype, device=device, generator=gen)[:, :, :D]
                for name in ("q", "k")}
    conv_out = torch.randn(T, (2 * H + shape["HV"]) * D, dtype=dtype, device=device, generator=gen)
    q, k = conv_out[:, :H * D], conv_out[:, H * D:2 * H * D]
    return {"q": q.view(T, H, D), "k": k.view(T, H, D)}          # strides (C, D, 1)


implement(
    "l2norm_qk", family="deltanet_gates", function="l2norm_qk", reference=l2norm_qk,
    make_inputs=_qk_inputs,
    make_out=lambda inp: {"q_out": torch.empty(inp["q"].shape, dtype=inp["q"].dtype, device=inp["q"].device),
                          "k_out": torch.empty(inp["k"].shape, dtype=inp["k"].dtype, device=inp["k"].device)},
    shapes={"tiny": [{"T": 3, "H": 2, "HV": 4, "D": 24, "view": 1}, {"T": 5, "H": 3, "HV": 3, "D": 40, "view": 2},
                     {"T": 1, "H": 2, "HV": 4, "D": 32, "view": 0}],
            "real": [{"T": 1, "H": 16, "HV": 16, "D": 128, "view": 1},
                     {"T": 128, "H": 16, "HV": 16, "D": 128, "view": 1}]},
    # zero rows need eps (0 / sqrt(0) is NaN), tiny ones feel it, huge ones overflow fp16 squares
    edges=norm_edges("q"),
    dims={"q_out": ("token", "key head", "column"), "k_out": ("token", "key head", "column")},
    bytes=lambda inp: 2 * sum(math.prod(inp[n].shape) * inp[n].element_size() for n in ("q", "k")),
)
