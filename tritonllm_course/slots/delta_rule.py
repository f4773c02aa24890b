"""Slot specs of chapters 15 and 16: the gated delta rule, recurrent (decode) and chunked (prefill).

Both are checked against the plain fp64 recurrence, token by token: the chunked kernel must give what
the definition gives, not merely what another chunked formula gives.
"""
import torch
import torch.nn.functional as F

from . import implement, tensor_bytes
from ..reference import gated_delta_rule_chunked, gated_delta_rule_recurrent, l2norm_qk


def make_inputs(shape, dtype, device, gen):
    """q, k unit length per head (q scaled), v ~ N(0, 1), beta = sigmoid(N(0, 1)), and a log-decay
    g = logsigmoid(N(4, 1)) in [-0.13, -0.002] for most tokens: the state keeps a token for tens to
    hundreds of steps, so what one chunk hands to the next matters to the result."""
    T, H, HV, DK, DV = (shape[key] for key in ("T", "H", "HV", "DK", "DV"))

    def randn(*size):
        return torch.randn(*size, device=device, generator=gen)

    q, k = l2norm_qk(randn(T, H, DK), randn(T, H, DK))
    inputs = {"q": q.to(dtype), "k": k.to(dtype), "v": randn(T, HV, DV).to(dtype),
              "g": F.logsigmoid(randn(T, HV) + 4.0), "beta": torch.sigmoid(randn(T, HV)).to(dtype),
              "initial_state": 0.5 * randn(HV, DK, DV) if shape.get("state", True) else None}
    if "chunk" in shape:
        inputs["chunk_size"] = shape["chunk"]
    return inputs


def make_out(inp):
    T, HV, DV = inp["v"].shape
    DK = inp["k"].shape[-1]
    return {"out": torch.empty(T, HV, DV, dtype=inp["v"].dtype, device=inp["v"].device),
            "final_state": torch.empty(HV, DK, DV, dtype=torch.float32, device=inp["v"].device)}


def recurrence(q, k, v, g, beta, initial_state=None, chunk_size=None):
    """The oracle of both slots: the definition, one token at a time (chunk_size is not used)."""
    return gated_delta_rule_recurrent(q, k, v, g, beta, initial_state)


def moved(inp):
    """Inputs read, o written, the state read (when given) and written once."""
    T, HV, DV = inp["v"].shape
    DK = inp["k"].shape[-1]
    state = HV * DK * DV * 4
    return (tensor_bytes(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], inp["initial_state"])
            + T * HV * DV * inp["v"].element_size() + state)


def recurrent_flops(inp):
    T, HV, DV = inp["v"].shape
    return 7 * T * HV * inp["k"].shape[-1] * DV      # decay, S^T k, k u^T, S^T q per token


def chunked_flops(inp):
    """Matrix products of the chunked form: per chunk K K^T, Q K^T, w, u, P v_new ([C, C] x [C, D]),
    and w S, k^T v_new, q S ([C, DK] x [DK, DV])."""
    T, HV, DV = inp["v"].shape
    DK, C = inp["k"].shape[-1], inp["chunk_size"]
    return 2 * T * HV * (C * (3 * DK + 2 * DV) + 3 * DK * DV)


_REAL = {"H": 16, "HV": 16, "DK": 128, "DV": 128}     # Qwen3.5-0.8B: 16 key and 16 value heads of 128

implement(
    "gated_delta_recurrent", family="delta_rule", function="gated_delta_rule_recurrent",
    reference=recurrence, make_inputs=make_inputs, make_out=make_out,
    shapes={"tiny": [{"T": 1, "H": 2, "HV": 4, "DK": 32, "DV": 24},
                     {"T": 7, "H": 3, "HV": 3, "DK": 24, "DV": 40, "state": False}],
            "real": [{"T": 1, **_REAL}, {"T": 16, **_REAL}]},
    bytes=moved, flops=recurrent_flops,
    extra={"bench": [0]},    # the decode step; T = 16 is there for the check
)

implement(
    "gated_delta_chunked", family="delta_rule", function="gated_delta_rule_chunked",
    reference=recurrence, torch_impl=gated_delta_rule_chunked, make_inputs=make_inputs, make_out=make_out,
    shapes={"tiny": [{"T": 37, "H": 2, "HV": 4, "DK": 32, "DV": 24, "chunk": 16},
                     {"T": 70, "H": 1, "HV": 2, "DK": 24, "DV": 40, "chunk": 32, "state": False},
                     {"T": 67, "H": 1, "HV": 1, "DK": 32, "DV": 32, "chunk": 64}],
            "real": [{"T": 128, **_REAL, "chunk": 64}, {"T": 1024, **_REAL, "chunk": 64}]},
    bytes=moved, flops=chunked_flops,
)
