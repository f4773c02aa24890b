"""Slot specs of chapter 04_rmsnorm's zero-centred RMSNorm: ln1, ln2 (operators 14, 15) and the per-head q/k norm."""
import torch

from ..reference.norms import qk_norm, rms_norm
from . import Edge, implement, tensor_bytes
from .common import norm_edges


def _weight(dim, dtype, device, gen):
    # 1 + w with w ~ N(0, 0.1): far enough from 1 that a kernel ignoring w, or multiplying by w, fails
    return 0.1 * torch.randn(dim, dtype=dtype, device=device, generator=gen)


def _rows_inputs(shape, dtype, device, gen):
    return {"x": torch.randn(shape["T"], shape["hidden"], dtype=dtype, device=device, generator=gen),
            "weight": _weight(shape["hidden"], dtype, device, gen)}


def _heads_inputs(shape, dtype, device, gen):
    """q or k heads. q (`with_gate`) is read where q_proj leaves it: each head's query dims followed by
    its gate dims, a strided [T, heads, head_dim] view."""
    T, heads, d = shape["T"], shape["heads"], shape["head_dim"]
    width = 2 * d if shape.get("with_gate") else d
    x = torch.randn(T, heads, width, dtype=dtype, device=device, generator=gen)[..., :d]  # [T, heads, d]
    return {"x": x, "weight": _weight(d, dtype, device, gen)}


def _strided_rows(inputs, shape, dtype, gen):
    """x as a view of wider rows (hidden + 8 apart): the kernel also serves qk_norm, whose heads are
    strided views, and the output is packed either way; one that stores at the input's row offsets
    passes contiguous rows."""
    x = inputs["x"]
    wide = torch.randn(x.shape[0], x.shape[1] + 8, dtype=x.dtype, device=x.device, generator=gen)
    wide[:, :x.shape[1]] = x
    inputs["x"] = wide[:, :x.shape[1]]
    return inputs


def _out(inp):
    return {"out": torch.empty(inp["x"].shape, dtype=inp["x"].dtype, device=inp["x"].device)}


def _bytes(inp):
    return 2 * tensor_bytes(inp["x"]) + tensor_bytes(inp["weight"])


_LAYER_NORM = dict(family="rmsnorm", function="rms_norm", reference=rms_norm, make_inputs=_rows_inputs,
                   make_out=_out, bytes=_bytes, dims={"out": ("token", "column")},
                   edges=norm_edges() + [Edge("x a strided view", _strided_rows)])
implement("ln1", **_LAYER_NORM,
          shapes={"tiny": [{"T": 7, "hidden": 100}, {"T": 1, "hidden": 1030}],
                  "real": [{"T": 1, "hidden": 1024}, {"T": 128, "hidden": 1024}]})
implement("ln2", **_LAYER_NORM,
          shapes={"tiny": [{"T": 3, "hidden": 257}, {"T": 19, "hidden": 24}],
                  "real": [{"T": 1, "hidden": 1024}, {"T": 128, "hidden": 1024}]})
implement("qk_norm", family="rmsnorm", function="qk_norm", reference=qk_norm, make_inputs=_heads_inputs,
          make_out=_out, bytes=_bytes, edges=norm_edges(), dims={"out": ("token", "head", "column")},
          shapes={"tiny": [{"T": 3, "heads": 3, "head_dim": 40, "with_gate": True},
                           {"T": 1, "heads": 2, "head_dim": 96}],
                  "real": [{"T": 1, "heads": 8, "head_dim": 256, "with_gate": True},
                           {"T": 128, "heads": 8, "head_dim": 256, "with_gate": True},
                           {"T": 128, "heads": 2, "head_dim": 256}]})
