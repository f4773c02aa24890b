"""Weight-only quantization (chapter 31_weight_quant): a projection's weight stored in 8 bits, the activations
untouched.

A decode step at batch 1 reads every weight once, so its time is the weight bytes over the bandwidth;
8-bit weights halve the bytes of bf16. The weight W [N, K] (nn.Linear layout, one row per output) is
stored as q [N, K] (int8 or fp8 e4m3) and fp32 scales, and `W ~ q * scale`:

- per channel: one scale per row (output feature), `scale [N]`. The scale then factors out of the dot
  product, `y[n] = scale[n] * sum_k q[n, k] x[k]`, so a kernel applies it once per output.
- per group: one scale per row and per `group_size` consecutive columns, `scale [N, ceil(K / group_size)]`
  (the last group of a row may be partial). A large weight in one part of a row no longer coarsens the
  step of the whole row; the kernel applies the scale inside its K loop, once per group.

Symmetric (zero point 0): `q = round(W / scale)`, scale = amax / 127. Projection weights are centred on
zero, so an offset would buy almost no range, and without one the kernel's inner loop is a multiply-add on
the raw integers: no subtraction per element, and the dot product of q with x needs no correction term.
The int8 range is used as [-127, 127]: -128 has no positive twin, and a symmetric grid keeps `-W` exact.
fp8 e4m3 (`torch.float8_e4m3fn`) stores 1 sign, 4 exponent and 3 mantissa bits, finite up to 448: the
scale maps a row's amax to 448, and the rounding is to the nearest e4m3 value (a relative step, where
int8's is absolute).
"""
from __future__ import annotations

import torch

from .precision import acc, expect, shape_str

INT8_MAX = 127      # the symmetric int8 grid: [-127, 127]
FP8_MAX = 448.0     # the largest finite float8_e4m3fn
FORMATS = ("int8", "int8_group", "fp8")   # per channel, per group, fp8 per channel


def groups(K: int, group_size: int | None) -> int:
    """How many scales a row has: 1 per channel, ceil(K / group_size) per group (the last may be partial)."""
    return 1 if group_size is None else -(-K // group_size)


def _amax(weight: torch.Tensor, group_size: int | None) -> torch.Tensor:
    """max |W| per row [N], or per row and group [N, G] (a partial last group padded with zeros)."""
    w = acc(weight).abs()
    if group_size is None:
        return w.amax(dim=1)
    N, K = w.shape
    G = groups(K, group_size)
    padded = torch.zeros(N, G * group_size, dtype=w.dtype, device=w.device)
    padded[:, :K] = w
    return padded.view(N, G, group_size).amax(dim=2)                   # [N, G]


def _per_column(scale: torch.Tensor, K: int, group_size: int | None) -> torch.Tensor:
    """The scale of every weight element: [N, 1] per channel, [N, K] per group (each group's repeated)."""
    if group_size is None:
        return scale[:, None]
    return scale.repeat_interleave(group_size, dim=1)[:, :K]           # [N, G * group_size] -> [N, K]


def quantize_int8(weight: torch.Tensor, group_size: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8: q = round(W / scale) in [-127, 127], scale = amax / 127 (fp32).

    weight: [N, K] float; group_size: None (one scale per row) or the columns a scale covers.
    returns q [N, K] int8 and scale [N] or [N, ceil(K / group_size)] fp32. An all-zero row (or group)
    gets scale 1: any scale dequantizes its zeros exactly, and 0 / 0 would be NaN.
    """
    expect(weight.dim() == 2, f"weight has shape {shape_str(weight)}; expected [N, K]")
    amax = _amax(weight, group_size)
    scale = torch.where(amax > 0, amax / INT8_MAX, torch.ones_like(amax)).to(torch.float32)
    w = acc(weight)
    q = torch.round(w / _per_column(scale.to(w.dtype), w.shape[1], group_size)).clamp(-INT8_MAX, INT8_MAX)
    return q.to(torch.int8), scale


def quantize_fp8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp8 e4m3 with one scale per row: q = fp8(W / scale), scale = amax / 448 (fp32).

    weight: [N, K] float. returns q [N, K] float8_e4m3fn and scale [N] fp32 (1 for an all-zero row).
    """
    expect(weight.dim() == 2, f"weight has shape {shape_str(weight)}; expected [N, K]")
    amax = _amax(weight, None)
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax)).to(torch.float32)
    w = acc(weight)
    # clamp first: a value that rounds past 448 would become NaN (e4m3fn has no infinity)
    q = (w / scale.to(w.dtype)[:, None]).clamp(-FP8_MAX, FP8_MAX)
    return q.to(torch.float8_e4m3fn), scale


def quantize(weight: torch.Tensor, fmt: str, group_size: int = 128) -> tuple[torch.Tensor, torch.Tensor, int | None]:
    """One of FORMATS: returns (q, scale, group_size or None)."""
    if fmt == "int8":
        return (*quantize_int8(weight), None)
    if fmt == "int8_group":
        return (*quantize_int8(weight, group_size), group_size)
    if fmt == "fp8":
        return (*quantize_fp8(weight), None)
    raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")


def dequantize(weight: torch.Tensor, scale: torch.Tensor, group_size: int | None = None,
               dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """W = q * scale in `dtype`.

    weight: [N, K] int8 or float8_e4m3fn (or their values in a float dtype); scale: [N] or [N, G] as
    made by `quantize_int8` / `quantize_fp8`. returns [N, K] in `dtype`.
    """
    expect(weight.dim() == 2, f"weight has shape {shape_str(weight)}; expected [N, K]")
    N, K = weight.shape
    want = (N,) if group_size is None else (N, groups(K, group_size))
    expect(tuple(scale.shape) == want, f"scale has shape {shape_str(scale)}; expected {list(want)} "
                                       f"for weight {shape_str(weight)} and group_size {group_size}")
    return weight.to(dtype) * _per_column(scale.to(dtype), K, group_size)


def quant_linear(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
                 group_size: int | None = None) -> torch.Tensor:
    """`x @ dequantize(weight, scale).T`: a projection with an 8-bit weight.

    x:      [..., K] float
    weight: [N, K] int8 or float8_e4m3fn (or their exact values in fp64, as the check passes them)
    scale:  [N] (per channel) or [N, ceil(K / group_size)] (per group), fp32
    returns [..., N] in x's dtype, computed in fp64 for fp64 x, else in fp32.
    """
    expect(weight.dim() == 2 and weight.shape[1] == x.shape[-1],
           f"weight has shape {shape_str(weight)}; expected [N, {x.shape[-1]}] for x of shape {shape_str(x)}")
    xa = acc(x)
    return (xa @ dequantize(weight, scale, group_size, xa.dtype).T).to(x.dtype)
