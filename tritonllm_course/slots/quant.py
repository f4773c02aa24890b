"""Slot specs of the 8-bit weight projections (chapter 31_weight_quant): the dequantizing GEMV (decode) and GEMM
(prompt), each with int8 per-channel scales, int8 per-group scales and fp8 e4m3 per-channel scales.

Shapes are {"M": tokens, "N": output rows, "K": input features, "group": columns a scale covers (per
group)}. The real ones are Qwen3.5-0.8B's merged projections (see slots/linear.py) and its tied LM head
248,320 x 1024, quantized with groups of 128. The tiny ones are odd: K = 131 and 509 end in a partial
group (groups of 32), K = 2085 takes the per-channel GEMV's 2048-wide step twice, M = 67 two programs along M.
The weights are quantized from N(0, 0.02) draws by the reference quantizer, so every row reaches +-127 (or
+-448): the whole grid is used.
"""
import torch
import torch.nn.functional as F

from ..reference.quant import dequantize, quant_linear, quantize
from ..triton_helpers import FP8_CAPABILITY
from . import Edge, implement, tensor_bytes
from .common import projection_flops, projection_out, scaled, zero_rows


def _make_inputs(fmt):
    def make(shape, dtype, device, gen):
        M, N, K = shape["M"], shape["N"], shape["K"]
        w = 0.02 * torch.randn(N, K, device=device, generator=gen)
        q, scale, group_size = quantize(w, fmt, shape.get("group", 128))
        return {"x": torch.randn(M, K, dtype=dtype, device=device, generator=gen),
                "weight": q, "scale": scale, "group_size": group_size}
    return make


def eager(x, weight, scale, group_size=None):
    """PyTorch eager as one would write it: the whole weight dequantized to x's dtype, then `F.linear`. The
    dequantized copy is written and read again, so it moves more bytes than the bf16 projection itself."""
    return F.linear(x, dequantize(weight, scale, group_size, x.dtype))


def quant_bytes(inp):
    """The 8-bit weight and its fp32 scales read once, x read once, y written once."""
    M, N = inp["x"].shape[0], inp["weight"].shape[0]
    return tensor_bytes(inp["x"], inp["weight"], inp["scale"]) + M * N * inp["x"].element_size()


def _int8_extremes(inputs, shape, dtype, gen):
    """Row 0 alternates -128 and 127, the last row is all -128 (int8's ends, which the symmetric quantizer
    never writes but a checkpoint may): a load that loses the sign, or clips, shows there."""
    q = inputs["weight"]
    q[0] = torch.tensor([-128, 127], dtype=torch.int8, device=q.device).repeat(q.shape[1])[:q.shape[1]]
    q[-1] = -128
    return inputs


def _zero_rows(inputs, shape, dtype, gen):
    """The first and last weight rows all zero, with the scale 1 the quantizer gives them: y is 0 there."""
    inputs["weight"][0] = 0
    inputs["weight"][-1] = 0
    inputs["scale"][0] = 1
    inputs["scale"][-1] = 1
    return inputs


def _one_big_weight(inputs, shape, dtype, gen):
    """A weight of every row scaled up by 100 before quantizing, in the row's last (partial) group: the group
    that holds it gets a scale 100 times larger, the others keep theirs. A kernel that takes one group's scale for
    another's (or skips the last group) is then far off."""
    K, group = shape["K"], shape.get("group", 128)
    w = 0.02 * torch.randn(shape["N"], K, device=inputs["x"].device, generator=gen)
    w[:, K - 1] *= 100
    q, scale, _ = quantize(w, "int8_group", group)
    inputs["weight"], inputs["scale"] = q, scale
    return inputs


# x ~ 1000: one product q * x alone (|q| up to 127) passes 65504, fp16's largest value, so an fp16 accumulator
# overflows however few products a lane sums (one or two on a GPU, whose K steps are 512 to 2048 wide: with
# x ~ 100 such a lane stayed in range and the check passed a kernel that accumulates in fp16), while
# y (~ 1000 x 0.02 x sqrt(K)) stays well inside: the accumulation must be fp32 even where the output is fp16
LARGE_X = scaled("x", "large activations (one int8 product past fp16's range)", 1000.0)
EDGES = [Edge("int8 extremes -128 and 127", _int8_extremes), Edge("zero weight rows", _zero_rows), LARGE_X]
GROUP_EDGES = [*EDGES, Edge("one large weight in the last, partial group", _one_big_weight)]
FP8_EDGES = [zero_rows("x", (0,), "zero activations"), LARGE_X]


def _shape(M, N, K, group=None):
    return {"M": M, "N": N, "K": K} | ({"group": group} if group else {})


PROMPT = 128
REAL = [(5120, 1024), (8224, 1024), (7168, 1024), (1024, 3584), (1024, 2048), (248320, 1024)]
FORMATS = {   # slot suffix: (quantization format, edges, title)
    "": ("int8", EDGES, "int8 per channel"),
    ".group": ("int8_group", GROUP_EDGES, "int8 per group"),
    ".fp8": ("fp8", FP8_EDGES, "fp8 e4m3 per channel"),
}

for suffix, (fmt, edges, title) in FORMATS.items():
    group = 32 if fmt == "int8_group" else None
    real_group = 128 if fmt == "int8_group" else None
    # fp8 e4m3 converts in hardware from sm_89 on (the wrapper refuses older GPUs); the interpreter runs it anywhere
    needs = FP8_CAPABILITY if fmt == "fp8" else None
    implement(f"quant_gemv{suffix}", family="quant", function="quant_gemv", title=f"dequantizing GEMV, {title}",
              chapter="31_weight_quant", qwen="every projection and the LM head at decode, from 8-bit weights",
              reference=quant_linear, torch_impl=eager, make_inputs=_make_inputs(fmt), make_out=projection_out,
              bytes=quant_bytes, flops=projection_flops, edges=edges, dims={"out": ("token", "feature")},
              min_capability=needs,
              shapes={"tiny": [_shape(1, 131, 509, group), _shape(1, 509, 131, group), _shape(1, 67, 2085, group)],
                      "real": [_shape(1, N, K, real_group) for N, K in REAL]})
    implement(f"quant_gemm{suffix}", family="quant", function="quant_gemm", title=f"dequantizing GEMM, {title}",
              chapter="31_weight_quant", qwen="the projections over a whole prompt, from 8-bit weights",
              reference=quant_linear, torch_impl=eager, make_inputs=_make_inputs(fmt), make_out=projection_out,
              bytes=quant_bytes, flops=projection_flops, edges=edges, dims={"out": ("token", "feature")},
              min_capability=needs,
              shapes={"tiny": [_shape(67, 131, 200, group), _shape(37, 509, 131, group),
                               _shape(16, 40, 509, group)],
                      "real": [_shape(PROMPT, N, K, real_group) for N, K in REAL[:5]]})
