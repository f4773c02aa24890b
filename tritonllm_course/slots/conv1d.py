"""Slot specs of chapter 13_conv1d's causal depthwise conv1d (prefill and decode) and of the fused
conv + SiLU + L2-norm variants of chapter 17_deltanet_layer."""
import torch

from ..reference.conv1d import conv1d_decode, conv1d_l2norm_decode, conv1d_l2norm_prefill, conv1d_prefill
from . import implement, tensor_bytes
from .common import sized


def _conv_inputs(T, C, K, with_state, dtype, device, gen):
    # conv taps ~ N(0, 0.3): trained taps are O(0.1-1); at N(0, 0.02) silu would be nearly linear and a
    # wrong tap order would hardly show
    x = torch.randn(T, C, dtype=dtype, device=device, generator=gen)
    weight = 0.3 * torch.randn(C, K, dtype=dtype, device=device, generator=gen)
    state = torch.randn(C, K, dtype=dtype, device=device, generator=gen) if with_state else None
    return {"x": x, "weight": weight, "conv_state": state}


def _prefill_inputs(shape, dtype, device, gen):
    return _conv_inputs(shape["T"], shape["C"], shape["K"], shape["state"], dtype, device, gen)


def _decode_inputs(shape, dtype, device, gen):
    return _conv_inputs(1, shape["C"], shape["K"], True, dtype, device, gen)


def _heads_inputs(shape, dtype, device, gen, T, with_state):
    """x of 2 * H key heads of D channels and HV value heads of DV (default D)."""
    DV = shape.get("DV", shape["D"])
    C = 2 * shape["H"] * shape["D"] + shape["HV"] * DV
    inputs = _conv_inputs(T, C, shape["K"], with_state, dtype, device, gen)
    return {**inputs, "key_heads": shape["H"], "head_dim": shape["D"], "value_head_dim": DV}


def _new_state(inp):
    return torch.empty(inp["weight"].shape, dtype=inp["x"].dtype, device=inp["x"].device)   # [C, K]


def _prefill_out(inp):
    return {"out": torch.empty_like(inp["x"]), "new_state": _new_state(inp)}


def _qkv_out(inp):
    """q, k in fp32 (what the delta rule reads), v in x's dtype."""
    T, H, D, DV, x = inp["x"].shape[0], inp["key_heads"], inp["head_dim"], inp["value_head_dim"], inp["x"]
    HV = (x.shape[1] - 2 * H * D) // DV
    return {"q": torch.empty(T, H, D, dtype=torch.float32, device=x.device),
            "k": torch.empty(T, H, D, dtype=torch.float32, device=x.device),
            "v": torch.empty(T, HV, DV, dtype=x.dtype, device=x.device)}


def _read_and_written(make_out, state_rewritten):
    """Bytes: every input read once, every output written once, plus the state when it is rewritten in place."""
    def count(inp):
        written = tensor_bytes(*make_out(inp).values())
        return tensor_bytes(*inp.values()) + written + (tensor_bytes(inp["conv_state"]) if state_rewritten else 0)
    return count


_STATE = ("channel", "tap")
# A prompt of fewer tokens than the conv's taps, from no state (a new sequence's 1-3 token prompt): the new
# state's first columns precede token 0 and must be written as zeros (not left unwritten, not read from the
# state pointer, which then holds x).
SHORT_PROMPT = [sized("a prompt shorter than the conv, no state", {"T": 2, "state": 0}, presets=("tiny", "real"))]
_QKV = {"q": ("token", "key head", "column"), "k": ("token", "key head", "column"),
        "v": ("token", "value head", "column")}

implement(
    "conv1d_prefill", family="conv1d", function="conv1d_prefill", reference=conv1d_prefill,
    make_inputs=_prefill_inputs, make_out=_prefill_out,
    # T = 21, C = 160: two tiles of 16 tokens x 128 channels on each grid axis, the last ones partial
    shapes={"tiny": [{"T": 21, "C": 160, "K": 4, "state": 1}, {"T": 3, "C": 40, "K": 4, "state": 1},
                     {"T": 5, "C": 37, "K": 4, "state": 0}],
            "real": [{"T": 128, "C": 6144, "K": 4, "state": 0}, {"T": 4096, "C": 6144, "K": 4, "state": 0},
                     {"T": 128, "C": 6144, "K": 4, "state": 1}]},
    bytes=_read_and_written(_prefill_out, False),
    edges=SHORT_PROMPT,
    dims={"out": ("token", "channel"), "new_state": _STATE},
)

implement(
    "conv1d_decode", family="conv1d", function="conv1d_decode", reference=conv1d_decode,
    make_inputs=_decode_inputs, make_out=lambda inp: {"out": torch.empty_like(inp["x"])},
    mutated=("conv_state",),
    shapes={"tiny": [{"C": 70, "K": 4}, {"C": 300, "K": 4}], "real": [{"C": 6144, "K": 4}]},
    bytes=_read_and_written(lambda inp: {"out": inp["x"]}, True),
    dims={"out": ("token", "channel"), "conv_state": _STATE},
)

implement(
    "conv1d_l2norm.prefill", title="conv1d + SiLU + L2 norm of q, k (prefill)",
    qwen="the conv output split into heads and q, k normalised in the same kernel", chapter="17_deltanet_layer",
    family="conv1d", function="conv1d_l2norm_prefill", reference=conv1d_l2norm_prefill,
    make_inputs=lambda shape, dtype, device, gen: _heads_inputs(shape, dtype, device, gen, shape["T"],
                                                                shape["state"]),
    make_out=lambda inp: {**_qkv_out(inp), "new_state": _new_state(inp)},
    shapes={"tiny": [{"T": 5, "H": 2, "HV": 4, "D": 24, "K": 4, "state": 1},
                     {"T": 18, "H": 1, "HV": 1, "D": 32, "K": 4, "state": 0},
                     {"T": 4, "H": 1, "HV": 3, "D": 16, "DV": 12, "K": 4, "state": 1}],
            "real": [{"T": 128, "H": 16, "HV": 16, "D": 128, "K": 4, "state": 0}]},
    bytes=_read_and_written(lambda inp: {**_qkv_out(inp), "new_state": _new_state(inp)}, False),
    edges=SHORT_PROMPT,
    dims={**_QKV, "new_state": _STATE},
)

implement(
    "conv1d_l2norm.decode", title="conv1d + SiLU + L2 norm of q, k (decode)",
    qwen="one launch from in_proj_qkv's output to the delta rule's q, k, v; state rolled in place",
    chapter="17_deltanet_layer",
    family="conv1d", function="conv1d_l2norm_decode", reference=conv1d_l2norm_decode,
    make_inputs=lambda shape, dtype, device, gen: _heads_inputs(shape, dtype, device, gen, 1, True),
    make_out=_qkv_out, mutated=("conv_state",),
    shapes={"tiny": [{"H": 2, "HV": 4, "D": 24, "K": 4}, {"H": 1, "HV": 3, "D": 16, "K": 4},
                     {"H": 1, "HV": 2, "D": 16, "DV": 24, "K": 4}],
            "real": [{"H": 16, "HV": 16, "D": 128, "K": 4}]},
    bytes=_read_and_written(_qkv_out, True),
    dims={**_QKV, "conv_state": _STATE},
)
