"""The ladder's naive projection (chapter 29_naive_to_fast): one program per output element (on a GPU), the weight read
at whatever strides it has, and the prompt run through it one token row at a time.

- `per_output_linear` is a GEMV whose program n computes y[n] alone, at the weight's strides: the same
  kernel reads a row-major weight (coalesced) and a transposed one (not), so the ladder's first step
  measures coalescing and nothing else. Its kernel is chapter 29_naive_to_fast's exercise, `exercises/naive_gemv.py`
  (`solutions/naive_gemv.py` says more): a walk along K, which the student version of the course leaves
  to the learner as it does chapter 05_projections's.
- `Transposed` keeps a transposed copy of every matrix of a model and runs the projection on it: the
  ladder's naive step, whose model still passes the row-major weights to its `linear`.
- `token_by_token` launches a projection once per token row: a prompt of T tokens is T GEMVs of each
  matrix (the article's naive prefill) rather than one GEMM.
"""
from __future__ import annotations

from typing import Callable

import torch

from .. import kernels, validate


def per_output_linear(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None,
                      source: str | None = None) -> torch.Tensor:
    """One token through a projection, one program per output (`naive_gemv.per_output_linear`, chapter
    29_naive_to_fast's exercise): the learner's once written, else the solution (`kernels`; `source` as there)."""
    return kernels.get("naive_gemv", "per_output_linear", source)(x, weight, out=out)


class Transposed:
    """A transposed copy ([K, N], contiguous) of every matrix of `weights`, and a projection that reads the
    copy of the weight it is given (`per_output_linear` unless `kernel` says otherwise): what the naive step
    runs. The copies cost the weights' size again; they are made once, outside any timing."""

    def __init__(self, weights: dict[str, torch.Tensor], kernel: Callable = per_output_linear):
        self.kernel = kernel
        self.copies = {self._key(w): w.t().contiguous() for w in weights.values() if w.dim() == 2}

    @staticmethod
    def _key(w: torch.Tensor) -> tuple:
        return w.data_ptr(), tuple(w.shape), w.dtype

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        copy = self.copies.get(self._key(weight))
        if copy is None:
            raise ValueError(f"no transposed copy of a weight of shape {list(weight.shape)}: Transposed holds the "
                             "matrices of the weights it was built from")
        return self.kernel(x, copy.t(), out=out)          # [K, N] storage seen as [N, K], strides (1, N)


def token_by_token(gemv: Callable) -> Callable:
    """A projection `linear(x, weight, out=None)` for x [..., K] that launches `gemv` once per token row."""
    def linear(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        validate.tensor(weight, "weight", dtype=validate.FLOATS, ndim=2, contiguous=False)
        N, K = weight.shape
        validate.tensor(x, "x", dtype=weight.dtype)
        if x.dim() == 0 or x.shape[-1] != K:
            raise ValueError(f"x has shape {list(x.shape)}; its last dimension must be K = {K}, the second "
                             f"dimension of weight {list(weight.shape)}")
        out = validate.output(out, "out", (*x.shape[:-1], N), x.dtype, x.device)
        rows, out_rows = x.reshape(-1, K), out.view(-1, N)                    # [T, K], [T, N]
        for t in range(rows.shape[0]):
            gemv(rows[t:t + 1], weight, out=out_rows[t:t + 1])                # [1, K] -> [1, N]
        return out
    linear.__name__ = f"token_by_token({getattr(gemv, '__name__', 'gemv')})"
    return linear
