"""The short prompt's GEMM + residual split along K: chapter 24_split_k's two stages, for a prompt instead of one token.

At 128 tokens the down projection + residual (y = residual + x @ W.T, W [1,024, 3,584]) is a GEMM of few
output tiles and long rows: 64 x 16 tiles make 128 programs for 132 SMs, each walking 3,584 columns, and the
kernel waits on latency, one program an SM (lab/prompt_gemm_ncu_probe.py). Cutting K into `SPLIT` pieces
gives each output tile SPLIT programs over a quarter of the row each, twice the programs at 64 x 32 tiles.
The pieces are added as in chapter 24_split_k's `splitk_gemv`, not by atomics: stage 1 writes each piece's
fp32 sums to a workspace [SPLIT, M, N]; stage 2 adds them to the residual in a fixed order (the same bits every
run, in a CUDA graph or not, with PDL or not) and rounds once, to the stream's dtype.

Taken (`splits`) at `MIN_M` to `MAX_M` tokens for long rows (K >= `LONG_ROWS` x N) where the unsplit grid leaves
most SMs idle; on a GPU only (the interpreter runs it when a test asks). Measured on an H100 at 128 tokens
(lab/prompt_splitk_probe.py): faster than the unsplit kernel and than cuBLAS's `torch.addmm` at the down
projection, and not at o_proj / out_proj (K = 2 N), where the unsplit kernel stays; the in-projections lost to
it as well (N > K).
"""
import torch
import triton
import triton.language as tl

from . import triton_helpers as helpers
from .triton_helpers import pdl_enter

MIN_M, MAX_M = 65, 128   # prompt chunks the split is taken for: measured at 128, the same two row blocks from 65
LONG_ROWS = 3        # K >= LONG_ROWS * N: the down projection (K = 3.5 N), not o_proj / out_proj (K = 2 N)
SPLIT = 4            # pieces of K: the probe's fastest at the down projection
# (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages): the probe's fastest tile with SPLIT = 4, the same at both shapes
TILE = (64, 32, 128, 4, 3)
REDUCE_BLOCK = 1024  # output elements a program of stage 2


@triton.jit
def k_slice_tile(x_ptr, w_ptr, rm, rn, M, N, K, k_lo, k_hi, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr):
    """fp32 [BLOCK_M, BLOCK_N]: sum over k in [k_lo, min(k_hi, K)) of x[rm, k] W[rn, k], x [M, K] and W [N, K]
    row-major; rows, columns and k past the edges masked."""
    rk = tl.arange(0, BLOCK_K)
    m_ok, n_ok = rm < M, rn < N
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(k_lo, tl.minimum(k_hi, K), BLOCK_K):
        k_ok = (k0 + rk) < K
        a = tl.load(x_ptr + rm[:, None].to(tl.int64) * K + (k0 + rk)[None, :], mask=m_ok[:, None] & k_ok[None, :],
                    other=0.0)                                                      # [BLOCK_M, BLOCK_K]
        b = tl.load(w_ptr + rn[None, :].to(tl.int64) * K + (k0 + rk)[:, None], mask=k_ok[:, None] & n_ok[None, :],
                    other=0.0)                                                      # [BLOCK_K, BLOCK_N]
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def splitk_part_kernel(x_ptr, w_ptr, part_ptr, M, N, K, K_PER,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       PDL: tl.constexpr = False):
    """Stage 1: part[s, m, n] = sum over the s-th K_PER columns of x[m, k] W[n, k], in fp32; program (m, n, s)."""
    pdl_enter(PDL)
    s = tl.program_id(2)
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = k_slice_tile(x_ptr, w_ptr, rm, rn, M, N, K, s * K_PER, (s + 1) * K_PER, BLOCK_M, BLOCK_N, BLOCK_K)
    offs = s.to(tl.int64) * M * N + rm[:, None].to(tl.int64) * N + rn[None, :]
    tl.store(part_ptr + offs, acc, mask=(rm < M)[:, None] & (rn < N)[None, :])


@triton.jit
def splitk_residual_kernel(part_ptr, res_ptr, y_ptr, MN, SPLIT: tl.constexpr, BLOCK: tl.constexpr,
                           PDL: tl.constexpr = False):
    """Stage 2: y = res + part[0] + part[1] + ..., in that order, rounded once; BLOCK elements a program."""
    pdl_enter(PDL)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < MN
    total = tl.load(res_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    for s in tl.static_range(SPLIT):
        total += tl.load(part_ptr + s * MN + offs, mask=ok, other=0.0)
    tl.store(y_ptr + offs, total.to(y_ptr.dtype.element_ty), mask=ok)


def splits(M: int, N: int, K: int, device: torch.device, interpreted_too: bool = False) -> int:
    """The pieces of K for the GEMM + residual of x [M, K] and W [N, K]: SPLIT where the module's docstring says,
    else 1 (the unsplit kernel). `interpreted_too`: also under the CPU interpreter (the tests)."""
    gpu = helpers.gpu_of(device)
    if (gpu is None and not interpreted_too) or not MIN_M <= M <= MAX_M or K < LONG_ROWS * N:
        return 1
    if gpu is None:                           # the interpreter, asked for: the split whatever the grid
        return SPLIT
    block_m, block_n = TILE[:2]
    # the unsplit grid at this tile fills half the SMs or more: more programs buy nothing for the pieces' traffic
    return SPLIT if triton.cdiv(M, block_m) * triton.cdiv(N, block_n) * 2 <= gpu.sms else 1


_WORKSPACES: dict = {}   # (device, N) -> fp32 [SPLIT * MAX_M * N]: one allocation, every later call reuses it


def workspace(device: torch.device, N: int) -> torch.Tensor:
    """The pieces' buffer for outputs N wide, made at the first call (outside any CUDA graph: the engine runs a
    prompt chunk eagerly before it captures it) and kept, so a captured graph's address stays valid."""
    key = (str(device), N)
    if key not in _WORKSPACES:
        _WORKSPACES[key] = torch.empty(SPLIT * MAX_M * N, device=device, dtype=torch.float32)
    return _WORKSPACES[key]


def launch(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor, out: torch.Tensor, split: int,
           pdl: dict) -> torch.Tensor:
    """out = residual + x @ weight.T for x [M, K], weight [N, K], residual and out [M, N] (out may be residual),
    all contiguous and checked by the caller (`layer_fusion.linear_residual`), M <= MAX_M, in `split` pieces."""
    M, K = x.shape
    N = weight.shape[0]
    block_m, block_n, block_k, warps, stages = TILE
    if not helpers.gpu_launch(x.device):      # the interpreter: tiles the size of the tiny shapes
        block_m, block_n, block_k, warps, stages = 16, 16, 16, 4, 1
    k_per = triton.cdiv(triton.cdiv(K, split), block_k) * block_k
    split = triton.cdiv(K, k_per)             # pieces that hold a column (a short K fills fewer)
    part = workspace(x.device, N)
    splitk_part_kernel[(triton.cdiv(M, block_m), triton.cdiv(N, block_n), split)](
        x, weight, part, M, N, K, k_per, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps,
        num_stages=stages, **pdl)
    splitk_residual_kernel[(triton.cdiv(M * N, REDUCE_BLOCK),)](part, residual, out, M * N, SPLIT=split,
                                                                BLOCK=REDUCE_BLOCK, num_warps=4, **pdl)
    return out
