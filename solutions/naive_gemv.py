"""The ladder's naive projection (chapter 29_naive_to_fast): one program per output element (on a GPU), the weight read
at whatever strides it has.

`per_output_linear` is a GEMV whose program n computes y[n] alone: its one warp walks the weight's row n in
steps of 32 elements, one element per lane, and sums once at the end. Stored row-major ([N, K], the PyTorch
layout), the 32 lanes of a step read 32 neighbouring elements (one 64-byte piece of bf16: the reads
coalesce). Stored transposed ([K, N], as the source article's engine keeps its matrices, viewed here as
[N, K] with strides (1, N)), they read 32 elements N apart: 32 separate 32-byte sectors for 64 useful bytes.
The kernel is the same for both layouts; only the strides differ, so the ladder's first step measures
coalescing and nothing else. It is chapter 05_projections's walk along a row (`linear.gemv_rows`) at any strides and
without the eviction hint: written here, in chapter 29_naive_to_fast, by the learner too.

Under the CPU interpreter programs run one after another at milliseconds each, whatever their size: there a
program takes 64 outputs and up to 2048 columns a step (the sums are the same; a GPU's memory system is what the
layouts are about).
"""
import torch
import triton
import triton.language as tl

from tritonllm_course import validate
from tritonllm_course.runtime import runtime

LANES = 32   # one warp: a step of the walk along K loads one element per lane


@triton.jit
def per_output_kernel(x_ptr, w_ptr, y_ptr, N, K, stride_n, stride_k, ROWS: tl.constexpr, BLOCK_K: tl.constexpr):
    """y[n] = sum_k W[n, k] x[k] for this program's ROWS outputs (one on a GPU); W[n, k] at
    w_ptr + n * stride_n + k * stride_k."""
    # BEGIN SOLUTION: this program's ROWS rows; walk K in BLOCK_K steps, W[n, k] at its strides (int64),
    #   one fp32 partial sum per lane; one sum across the lanes at the end, stored in y's dtype
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
    # END SOLUTION


def per_output_config(K: int, interpreted: bool = False) -> dict:
    """On a GPU one output per program, one warp, one element per lane per step. Under the interpreter a
    program costs milliseconds whatever it does: there one takes 64 outputs and up to 2048 columns a step (a
    longer row, the check's K = 2085, still walks K in steps, the last one partial)."""
    if interpreted:
        return {"ROWS": 64, "BLOCK_K": max(16, min(2048, triton.next_power_of_2(K))), "num_warps": 1}
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
