"""The one precision rule of the references.

Where the model computes in fp32 (norm statistics, softmax, the DeltaNet state, the gates), a low-precision
input is upcast to fp32; an fp64 input stays fp64, so a reference fed fp64 is accurate to fp64 and can
judge an fp32 kernel. Results go back to the input dtype unless the docstring says otherwise.
"""
from __future__ import annotations

import torch


def acc(x: torch.Tensor) -> torch.Tensor:
    """`x` in the accumulation dtype: fp64 stays fp64, anything else becomes fp32."""
    return x if x.dtype == torch.float64 else x.float()


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """The accumulation dtype for tensors of `dtype` (fp64 for fp64, fp32 otherwise)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def expect(cond: bool, message: str) -> None:
    """Raise a ValueError with `message` unless `cond`: bad shapes get a sentence, not a broadcast error."""
    if not cond:
        raise ValueError(message)


def shape_str(x: torch.Tensor) -> str:
    return str(list(x.shape))
