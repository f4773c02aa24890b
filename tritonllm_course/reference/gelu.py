"""GELU and a projection followed by it (chapter 28_compilers): the fused epilogue of the source article's matmul.

Qwen3.5-0.8B has no GELU (its MLP is SwiGLU, chapter 10_mlp): GELU is the activation of GPT-2 and BERT, and the
article's example of an epilogue fused into a GEMM. Two forms:

    exact:  gelu(x) = x * Phi(x) = 0.5 * x * (1 + erf(x / sqrt(2)))
    tanh:   gelu(x) ~ 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))

`approximate` takes PyTorch's names for them, "none" and "tanh" (`torch.nn.functional.gelu`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .linear import linear
from .precision import acc, expect

APPROXIMATE = ("none", "tanh")


def _check(approximate: str) -> None:
    expect(approximate in APPROXIMATE, f"approximate must be one of {APPROXIMATE}, got {approximate!r}")


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GELU elementwise, computed in fp32 (fp64 for fp64 input) and rounded once to x's dtype.

    x: any shape, float; approximate: "none" (erf) or "tanh"
    """
    _check(approximate)
    return F.gelu(acc(x), approximate=approximate).to(x.dtype)


def gelu_linear(x: torch.Tensor, weight: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """`gelu(x @ weight.T)`: a bias-free projection and its activation.

    x:      [M, K] float
    weight: [N, K] float, same dtype as x (nn.Linear layout)
    returns [M, N] in x's dtype. The projection is computed in the input dtype (fp32 sums inside the
    matmul, then rounded, as cuBLAS does), the GELU on that rounded value in fp32: what the unfused pair
    F.linear, then F.gelu computes. For fp64 inputs everything is fp64: the oracle of the fused kernel.
    """
    _check(approximate)
    return gelu(linear(x, weight), approximate)
