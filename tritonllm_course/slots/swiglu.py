"""Slot specs of SwiGLU (operator 11): separate gate and up, and the merged [gate | up] layout."""
import torch

from . import Edge, implement, tensor_bytes
from ..reference.mlp import swiglu, swiglu_merged

# tiny: two column programs of 1024 (the last partial) over several rows, and a single partial block
_SHAPES = {"tiny": [{"T": 3, "I": 1030}, {"T": 1, "I": 333}],
           "real": [{"T": 1, "I": 3584}, {"T": 128, "I": 3584}]}


def _inputs(shape, dtype, device, gen):
    size = (shape["T"], shape["I"])
    return {"gate": torch.randn(size, generator=gen, device=device).to(dtype),
            "up": torch.randn(size, generator=gen, device=device).to(dtype)}


def _merged_inputs(shape, dtype, device, gen):
    size = (shape["T"], 2 * shape["I"])                                             # [T, 2I] = [gate | up]
    return {"gate_up": torch.randn(size, generator=gen, device=device).to(dtype)}


def _large_gate(key):
    """gate ~ N(0, 50^2): about 4%<!-- not-measured: the normal distribution's tail --> of it past 88, where e^g
    overflows fp32; silu must still be ~ g, not the NaN of e^g / (1 + e^g) = inf / inf. The merged layout scales
    only its gate half."""
    def apply(inputs, shape, dtype, gen):
        gate = inputs[key][:, : shape["I"]]          # gate, or the gate half of [gate | up]
        gate.copy_((gate.to(torch.float32) * 50).to(dtype))
        return inputs
    return Edge("large gates", apply)


implement(
    "swiglu", family="swiglu", function="swiglu",
    reference=swiglu,
    make_inputs=_inputs,
    make_out=lambda inp: {"out": torch.empty_like(inp["gate"])},
    shapes=_SHAPES,
    edges=[_large_gate("gate")],
    dims={"out": ("token", "column")},
    bytes=lambda inp: 3 * tensor_bytes(inp["gate"]),
    flops=lambda inp: 5 * inp["gate"].numel(),        # exp, add, divide, two multiplies per element
)

implement(
    "swiglu.merged", title="SwiGLU on the merged gate/up output", op=11,
    qwen="silu(gate) * up read from one [T, 2 x 3584] tensor", chapter="10_mlp",
    family="swiglu", function="swiglu_merged",
    reference=swiglu_merged,
    make_inputs=_merged_inputs,
    make_out=lambda inp: {"out": inp["gate_up"].new_empty(inp["gate_up"].shape[0], inp["gate_up"].shape[1] // 2)},
    shapes=_SHAPES,
    edges=[_large_gate("gate_up")],
    dims={"out": ("token", "column")},
    bytes=lambda inp: tensor_bytes(inp["gate_up"]) * 3 // 2,
    flops=lambda inp: 5 * inp["gate_up"].numel() // 2,
)
