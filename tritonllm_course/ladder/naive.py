"""The ladder's naive projection (chapter 29): one program per output element (on a GPU), the weight read at
whatever strides it has, and the prompt run through it one token row at a time.

- `per_output_linear` is a GEMV whose program n computes y[n] alone: its one warp walks the weight's row n
  in steps of 32 elements, one element per lane, and sums once at the end. Stored row-major ([N, K], the
  PyTorch layout), the 32 lanes of a step read 32 neighbouring elements (one 64-byte piece of bf16: the
  reads coalesce). Stored transposed ([K, N], as the source article's engine keeps its matrices, viewed
  here as [N, K] with strides (1, N)), they read 32 elements N apart: 32 separate 32-byte sectors for
  64 useful bytes. The kernel is the same for both layouts; only the strides differ, so the ladder's
  first step measures coalescing and nothing else.
- `Transposed` keeps a transposed copy of every matrix of a model and runs the projection on it: the
  ladder's naive step, whose model still passes the row-major weights to its `linear`.
- `token_by_token` launches a projection once per token row: a prompt of T tokens is T GEMVs of each
  matrix (the article's naive prefill) rather than one GEMM.
Under the CPU interpreter programs run one after another at milliseconds each, whatever their size: there a
program takes 64 outputs and a whole row per step (the sums are the same; a GPU's memory system is what the
layouts are about).
"""
from __future__ import annotations

from typing import Callable

import torch
import triton
import triton.language as tl

from .. import validate
from ..runtime import runtime

LANES = 32   # one warp: a step of the walk along K loads one element per lane


@triton.jit
def per_output_kernel(x_ptr, w_ptr, y_ptr, N, K, stride_n, stride_k, ROWS: tl.constexpr, BLOCK_K: tl.constexpr):
    """y[n] = sum_k W[n, k] x[k] for this program's ROWS outputs (one on a GPU); W[n, k] at
    w_ptr + n * stride_n + k * stride_k."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < N
    row_start = w_ptr + rows.to(tl.int64) * stride_n                                        # [ROWS]
    cols = tl.arange(0, BLOCK_K)
    acc = tl.zeros([ROWS, BLOCK_K], dtype=tl.float32)     # one partial sum per lane, summed once at the end
    for k0 in range(0, K, BLOCK_K):
        k = k0 + cols
        k_ok = k < K
        x = tl.load(x_ptr + k, mask=k_ok, other=0.0).to(tl.float32)                          # [BLOCK_K]
        w = tl.load(row_start[:, None] + k[None, :].to(tl.int64) * stride_k,
                    mask=row_ok[:, None] & k_ok[None, :], other=0.0).to(tl.float32)         # [ROWS, BLOCK_K]
        acc += w * x[None, :]
    tl.store(y_ptr + rows, tl.sum(acc, axis=1).to(y_ptr.dtype.element_ty), mask=row_ok)


def per_output_config(K: int, interpreted: bool = False) -> dict:
    """On a GPU one output per program, one warp, one element per lane per step. Under the interpreter a
    program costs milliseconds whatever it does: there one takes 64 outputs and a whole row per step."""
    if interpreted:
        return {"ROWS": 64, "BLOCK_K": max(16, triton.next_power_of_2(K)), "num_warps": 1}
    return {"ROWS": 1, "BLOCK_K": LANES, "num_warps": 1}


def per_output_linear(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """One token through a projection, one program per output: `x @ weight.T`.

    x:      [K] or [1, K], contiguous, in the weight's dtype
    weight: [N, K] at any strides: row-major (stride_k = 1) or a transposed [K, N] storage (stride_n = 1)
    out:    optional [N] or [1, N] buffer (x's leading shape)
    returns y of shape x.shape[:-1] + [N], summed in fp32.
    """
    validate.tensor(weight, "weight", dtype=validate.FLOATS, ndim=2, contiguous=False)
    N, K = weight.shape
    validate.tensor(x, "x", dtype=weight.dtype)
    if x.dim() not in (1, 2) or x.shape[-1] != K or (x.dim() == 2 and x.shape[0] != 1):
        raise ValueError(f"per_output_linear takes one token, x of shape [{K}] or [1, {K}] for a weight of shape "
                         f"{list(weight.shape)}; got {list(x.shape)} (launch it per token: token_by_token)")
    device = validate.same_device(x=x, weight=weight)
    out = validate.output(out, "out", (*x.shape[:-1], N), x.dtype, device)
    cfg = per_output_config(K, runtime().interpreted)
    per_output_kernel[(triton.cdiv(N, cfg["ROWS"]),)](x, weight, out, N, K, weight.stride(0), weight.stride(1),
                                                      ROWS=cfg["ROWS"], BLOCK_K=cfg["BLOCK_K"],
                                                      num_warps=cfg["num_warps"])
    return out


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
