"""Edge inputs that several slots share (see `Edge`): scales where the arithmetic has edges, zero rows."""
from __future__ import annotations

import torch

from . import Edge, tensor_bytes

# Scales that reach the edges of each dtype's range without leaving it for a correct kernel:
# tiny: mean(x^2) near a norm's eps (1e-6), and squares that are subnormal in fp16;
# huge: squares that overflow fp16 (> 65504) but not fp32 statistics (1e30 x 1e4 elements < 3e38).
TINY_SCALE = 1e-3
HUGE_SCALE = {torch.float16: 300.0, torch.float32: 1e13, torch.bfloat16: 1e13, torch.float64: 1e13}


def scaled(key: str, name: str, scale) -> Edge:
    """inputs[key] multiplied by `scale` (a number, or {dtype: number})."""
    def apply(inputs, shape, dtype, gen):
        factor = scale[dtype] if isinstance(scale, dict) else scale
        inputs[key] = (inputs[key].to(torch.float32) * factor).to(inputs[key].dtype)
        return inputs
    return Edge(name, apply)


def zero_rows(key: str, rows=(0,), name: str = "a zero row") -> Edge:
    """inputs[key][r] = 0 for r in `rows` (the last index is -1): 0 / rms(0) must be 0, not NaN."""
    def apply(inputs, shape, dtype, gen):
        x = inputs[key]
        for r in rows:
            x[r] = 0
        return inputs
    return Edge(name, apply)


# Inputs past exp's overflow: exp(x) is inf in fp32 past 88.7 (in fp16 past 11.1). softplus written as
# log(1 + exp(x)) is then inf where it should be x, and sigmoid as exp(x) / (1 + exp(x)) is inf / inf;
# activations never stray that far at random, an input token can.
PAST_EXP = (100.0, -100.0, 15.0, -15.0)


def past_exp_overflow(*keys: str, offsets: dict | None = None) -> Edge:
    """The first and last row (token) of each input named cycle through PAST_EXP along the last dim (the
    last row negated, so that a single row has both signs too). `offsets` {key: other input}: that
    input is subtracted, so that key + other (softplus(a + dt_bias)) takes the values."""
    def apply(inputs, shape, dtype, gen):
        for row, sign in ((0, 1.0), (-1, -1.0)):
            for key in keys:
                x = inputs[key]
                values = sign * torch.tensor(PAST_EXP, device=x.device).repeat(x.shape[-1])[:x.shape[-1]]
                if offsets and key in offsets:
                    values = values - inputs[offsets[key]].to(torch.float32)
                x[row] = values.to(x.dtype)
        return inputs
    return Edge("inputs past exp's overflow", apply)


def fp32_stream(key: str = "residual") -> Edge:
    """inputs[key], the residual stream, in fp32 ~ N(0, 1e5^2): the fp16 mode keeps the stream in fp32 because
    it passes fp16's 65,504. What is added to it must be stored in the stream's dtype: rounded to the
    sublayer's (x's) fp16 it overflows to inf."""
    def apply(inputs, shape, dtype, gen):
        x = inputs[key]
        inputs[key] = 1e5 * torch.randn(x.shape, generator=gen, device=x.device)
        return inputs
    return Edge("an fp32 residual stream", apply)


def sized(name: str, shape: dict, presets=("real",)) -> Edge:
    """The slot's inputs at `shape` (fields over its first shape), unchanged: a size whose code path the
    mode's shapes never take (on a GPU by default)."""
    return Edge(name, lambda inputs, shape, dtype, gen: inputs, shape=shape, presets=presets)


def norm_edges(key: str = "x") -> list[Edge]:
    """The edges of every RMS-style norm: a zero row (needs eps), mean(x^2) near eps (needs eps and fp32
    statistics), squares past fp16's range (needs fp32 statistics)."""
    return [zero_rows(key, (0, -1), "zero rows"), scaled(key, "tiny scale", TINY_SCALE),
            scaled(key, "huge scale", HUGE_SCALE)]


# --- a projection y[M, N] = x[M, K] @ W[N, K].T (chapters 05_projections and 28_compilers) --------------------------
def projection_inputs(shape, dtype, device, gen):
    """x [M, K] ~ N(0, 1) and a weight [N, K] ~ N(0, 0.02), both in `dtype`."""
    M, N, K = shape["M"], shape["N"], shape["K"]
    return {"x": torch.randn(M, K, dtype=dtype, device=device, generator=gen),
            "weight": (0.02 * torch.randn(N, K, device=device, generator=gen)).to(dtype)}


def projection_out(inp):
    """The output buffer of a projection slot: [M, N] in x's dtype."""
    return {"out": torch.empty(inp["x"].shape[0], inp["weight"].shape[0], dtype=inp["x"].dtype,
                               device=inp["x"].device)}


def projection_bytes(inp):
    """x and W read once, y written once."""
    M, N = inp["x"].shape[0], inp["weight"].shape[0]
    return tensor_bytes(inp["x"], inp["weight"]) + M * N * inp["x"].element_size()


def projection_flops(inp):
    (M, K), N = inp["x"].shape, inp["weight"].shape[0]
    return 2 * M * N * K
