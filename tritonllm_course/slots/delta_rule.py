"""Slot specs of chapters 15_delta_rule and 16_delta_rule_chunked: the gated delta rule, recurrent (decode) and chunked
(prefill).

Both are checked against the plain fp64 recurrence, token by token: the chunked kernel must give what
the definition gives, not merely what another chunked formula gives.
"""
import torch
import torch.nn.functional as F

from . import Edge, implement, tensor_bytes
from ..reference import gated_delta_rule_chunked, gated_delta_rule_recurrent, l2norm_qk


def make_inputs(shape, dtype, device, gen):
    """q, k unit length per head (q scaled), v ~ N(0, 1), beta = sigmoid(N(0, 1)), and a log-decay
    g = logsigmoid(N(4, 1)) in [-0.13, -0.002] for most tokens: the state keeps a token for tens to
    hundreds of steps, so what one chunk hands to the next matters to the result."""
    T, H, HV, DK, DV = (shape[key] for key in ("T", "H", "HV", "DK", "DV"))

    def randn(*size):
        return torch.randn(*size, device=device, generator=gen)

    q, k = l2norm_qk(randn(T, H, DK), randn(T, H, DK))
    q, k, v = q.to(dtype), k.to(dtype), randn(T, HV, DV).to(dtype)
    if shape.get("views"):
        q, k, v = (_token_view(x, pad, gen) for x, pad in ((q, 8), (k, 24), (v, 40)))
    inputs = {"q": q, "k": k, "v": v,
              "g": F.logsigmoid(randn(T, HV) + 4.0), "beta": torch.sigmoid(randn(T, HV)).to(dtype),
              "initial_state": 0.5 * randn(HV, DK, DV) if shape.get("state", True) else None}
    if "chunk" in shape:
        inputs["chunk_size"] = shape["chunk"]
    return inputs


def _token_view(x, pad, gen):
    """x [T, heads, D] as a token-strided view, as the model slices q, k, v out of one projection: each
    token's row sits `pad` columns into a row of heads * D + pad, the other columns random. Distinct pads
    give q, k and v distinct token strides: a kernel that assumes packed rows, or reads one tensor at
    another's stride, reads the wrong tokens."""
    T, heads, D = x.shape
    rows = torch.randn(T, heads * D + pad, device=x.device, generator=gen).to(x.dtype)
    rows[:, pad:] = x.reshape(T, heads * D)
    return rows[:, pad:].view(T, heads, D)


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


def _same(inputs, shape, dtype, gen):
    return inputs


def _strong_decays(inputs, shape, dtype, gen):
    """Value head 0 forgets fast: g in [-15.5, -8] a token (a head whose decay all but erases its state every
    token, as trained heads may), so that a chunk's log-decay from its start, gamma, passes -88 within 11 tokens:
    exp(-gamma) overflows fp32 there. A chunked kernel that factors the decay exp(gamma_i - gamma_j) into
    exp(gamma_i) exp(-gamma_j), or that leaves exp(gamma_i - gamma_j) unclamped for the pairs i < j (exp of up
    to +240) and masks it by a product (inf * 0), returns NaN. The other heads keep their slow decays. Each g is
    a multiple of 1/2: fp32 sums them exactly (a chunk's -1,000 too), so a correct kernel's error stays that of
    the other edges (random g of this size would round gamma by 1e-5)."""
    g = inputs["g"]
    g[:, 0] = -8.0 - 0.5 * torch.randint(0, 16, (g.shape[0],), device=g.device, generator=gen)
    return inputs


# two chunks of 16, the second partial, two value heads (one of them fast); on a GPU chunks of 64
STRONG_DECAYS = [Edge("strong decays in head 0", _strong_decays, {"T": 20, "HV": 2, "DV": 24, "chunk": 16},
                      presets=("tiny",)),
                 Edge("strong decays in head 0", _strong_decays, {"T": 100, "chunk": 64}, presets=("real",))]


DIMS = {"out": ("token", "value head", "value column"), "final_state": ("value head", "key row", "value column")}

_REAL = {"H": 16, "HV": 16, "DK": 128, "DV": 128}     # Qwen3.5-0.8B: 16 key and 16 value heads of 128

implement(
    "gated_delta_recurrent", family="delta_rule", function="gated_delta_rule_recurrent",
    reference=recurrence, make_inputs=make_inputs, make_out=make_out,
    # T = 7: every token through views at distinct token strides (q, k and v sliced out of wider rows),
    # and HV != H, so that a token's g, beta and o rows (HV wide) are not confused with q's and k's (H)
    shapes={"tiny": [{"T": 1, "H": 2, "HV": 4, "DK": 32, "DV": 24},
                     {"T": 7, "H": 1, "HV": 2, "DK": 24, "DV": 24, "state": False, "views": 1}],
            "real": [{"T": 1, **_REAL}, {"T": 16, **_REAL, "views": 1}]},
    bytes=moved, flops=recurrent_flops, dims=DIMS,
    extra={"bench": [0]},    # the decode step; T = 16 is there for the check
)

implement(
    "gated_delta_chunked", family="delta_rule", function="gated_delta_rule_chunked",
    reference=recurrence, torch_impl=gated_delta_rule_chunked, make_inputs=make_inputs, make_out=make_out,
    # every chunk size, the last chunk always partial; the cheapest shape first (a fail_fast check stops
    # at the first failing case, and each of these catches a wrong chunk formula)
    shapes={"tiny": [{"T": 67, "H": 1, "HV": 1, "DK": 32, "DV": 32, "chunk": 64},
                     {"T": 37, "H": 1, "HV": 2, "DK": 32, "DV": 24, "chunk": 16},
                     {"T": 70, "H": 1, "HV": 2, "DK": 24, "DV": 40, "chunk": 32, "state": False}],
            "real": [{"T": 128, **_REAL, "chunk": 64}, {"T": 1024, **_REAL, "chunk": 64}]},
    # on the GPU, the chunk sizes the model runs (`chunk_size_for`: 16 up to 128 tokens, 32 below 512, 64 with
    # kernel 1 split in two from 512), with a partial last chunk (the real shapes above, the benchmark's, are
    # whole chunks of 64)
    edges=[Edge("chunks of 16, the last partial", _same, shape={"T": 100, "chunk": 16}, presets=("real",)),
           Edge("chunks of 32, the last partial", _same, shape={"T": 300, "chunk": 32, "state": False},
                presets=("real",)),
           Edge("chunks of 64, the last partial", _same, shape={"T": 600, "chunk": 64}, presets=("real",))]
    + STRONG_DECAYS,
    bytes=moved, flops=chunked_flops, dims=DIMS,
    # max-autotune tunes each product of the torch reference's loop over chunks: at T = 1,024 (16 chunks) the
    # row ran past 500 s<!-- unsaved: 2026-12-06 --> on an H100 (the kernel table) without finishing
    extra={"max_autotune_max": {"T": 128},
           "max_autotune_why": "the compile of the reference's loop over chunks ran past 500 s (H100, 2026-12-06)"},
)
