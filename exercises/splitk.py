"""Split-K decode GEMV (chapter 24_split_k): `y = x @ W.T` for one token, each row cut into pieces along K.

A decode GEMV gives each program a few rows of W [N, K]. When N is small (the narrow projections of
Qwen3.5: o_proj / out_proj 1024 x 2048, MLP down 1024 x 3584) there are few row blocks to hand out:
1024 rows at 4 per program are 256 programs for 132 SMs. Split-K cuts every row into SPLIT pieces along
K as well: the grid is (row blocks, pieces), SPLIT times as many programs, each reading a
[BLOCK_N, K / SPLIT] tile and producing BLOCK_N partial sums. The pieces of a row must then be added:

- `splitk_gemv` (two stages, deterministic): stage 1 writes the partial sums to `partials` [SPLIT, N]
  in fp32; stage 2 adds each column's SPLIT values in an order fixed when the kernel is compiled and
  casts to the output dtype. Same inputs, same bits, every run.
- `splitk_gemv_atomic`: every program adds its partial sums into one fp32 accumulator `acc` [N] with
  `tl.atomic_add`. The order of the additions is the order in which programs finish, which changes from
  run to run on a GPU, and fp32 addition is not associative: the low bits of the sums vary. `acc` must
  hold zeros before the first atomic lands. Here the second step, which casts `acc` to the output dtype,
  writes the zeros back as it reads, so a buffer kept across calls (as a CUDA graph does) is ready for the
  next call without a memset.

`choose_split` picks SPLIT from the number of SMs; `splitk_linear` is the drop-in for the model's
`linear`: the GEMM for a prompt, split-K for a token where it splits, the plain GEMV where it does not.
"""
import functools
import math

import torch
import triton
import triton.language as tl

from tritonllm_course import kernels, triton_helpers as helpers, validate
from tritonllm_course.runtime import runtime

# chapter 05_projections's walk along a row, from the learner's linear.py once written (`kernels.jit_function`)
gemv_rows = kernels.jit_function("linear", "gemv_rows", __file__)

# On the GPU: 4 rows x up to 512 columns per program and step (16 bf16 per thread at 4 warps: two 16-byte
# loads), and at least 8 programs per SM (8 x 4 KB in flight per SM covers the latency of HBM).
BLOCK_N, BLOCK_K, PROGRAMS_PER_SM = 4, 512, 8
# Under the CPU interpreter every program costs about the same whatever its size: big tiles, and a nominal GPU
# of one SM (programs run one at a time), so that the tiny model's narrow projections still split.
INTERPRETER_BLOCK_N, INTERPRETER_BLOCK_K = 32, 64


@triton.jit
def piece_sum(x_ptr, w_ptr, N, K, K_SPLIT, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """This program's rows and piece of K; grid (row blocks, pieces). Returns (rows [BLOCK_N], piece,
    the fp32 sums over the piece's columns [piece * K_SPLIT, min((piece + 1) * K_SPLIT, K)) [BLOCK_N])."""
    # BEGIN EXERCISE: rows from program_id(0), the piece from program_id(1), its columns; gemv_rows sums them
    raise NotImplementedError("exercise splitk.py, piece_sum: not implemented yet")
    # END EXERCISE


@triton.jit
def splitk_partial_kernel(x_ptr, w_ptr, part_ptr, N, K, K_SPLIT,
                          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Stage 1: part[piece, n] = the piece's sum for row n; part is fp32 [SPLIT, N]."""
    # BEGIN EXERCISE: piece_sum, then store the sums in row `piece` of part (mask the rows past N)
    raise NotImplementedError("exercise splitk.py, splitk_partial_kernel: not implemented yet")
    # END EXERCISE


@triton.jit
def splitk_atomic_kernel(x_ptr, w_ptr, acc_ptr, N, K, K_SPLIT,
                         BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """acc[n] += the piece's sum for row n, for every piece; acc is fp32 [N] and holds zeros before."""
    # BEGIN EXERCISE: piece_sum, then tl.atomic_add the sums into acc (mask the rows past N)
    raise NotImplementedError("exercise splitk.py, splitk_atomic_kernel: not implemented yet")
    # END EXERCISE


@triton.jit
def splitk_reduce_kernel(part_ptr, y_ptr, N, SPLIT, SPLIT_P2: tl.constexpr, BLOCK: tl.constexpr,
                         CLEAR: tl.constexpr):
    """Stage 2: y[n] = sum over s < SPLIT of part[s, n], cast to y's dtype, for this program's BLOCK
    columns. The order of the additions is tl.sum's, fixed at compile time, never the order in which
    stage 1's programs finished. CLEAR: also write zeros into the part values read (the atomic
    accumulator, ready for its next call)."""
    # BEGIN EXERCISE: a [SPLIT_P2, BLOCK] tile of part (masked to SPLIT rows, N columns), tl.sum over axis 0,
    #   stored in y's dtype; with CLEAR, zeros stored back over the tile read
    raise NotImplementedError("exercise splitk.py, splitk_reduce_kernel: not implemented yet")
    # END EXERCISE


def choose_split(N: int, K: int, sms: int, block_n: int = BLOCK_N, block_k: int = BLOCK_K,
                 programs_per_sm: int = PROGRAMS_PER_SM) -> int:
    """Into how many pieces to cut K, for an [N, K] weight on a GPU with `sms` SMs.

    Enough pieces that row blocks x pieces reaches programs_per_sm x sms, where the rows alone do not; and
    never a piece narrower than one block_k step. That bound also keeps the partial sums small: one fp32
    per piece and row is at most 4 bytes per block_k weights (under 0.4%<!-- fig:ch24.splitk.partials_pct --> of
    the weight bytes at 512).
    At the H200's 132 SMs: 1024 x 2048 -> 4, 1024 x 3584 -> 7, the 248,320-row LM head -> 1.
    """
    # BEGIN EXERCISE: pieces wanted = cdiv(programs_per_sm x sms, row blocks); whole block_k steps per piece
    raise NotImplementedError("exercise splitk.py, choose_split: not implemented yet")
    # END EXERCISE


def splitk_config(N: int, K: int, split: int | None = None, sms: int = 1, interpreted: bool = False) -> dict:
    """Launch parameters for an [N, K] weight cut into `split` pieces (None: `choose_split` with `sms`).

    A piece is a whole number of BLOCK_K steps (BLOCK_K no wider than the piece, a power of two >= 16),
    so the number of pieces is cdiv(K, K_SPLIT): the `split` asked for, or fewer when K / split is not a
    whole number of steps (with the GPU's 512-wide steps, K = 2048 and split 3 give 2 pieces of 1024).
    """
    block_n, block_k = (INTERPRETER_BLOCK_N, INTERPRETER_BLOCK_K) if interpreted else (BLOCK_N, BLOCK_K)
    if split is None:
        split = choose_split(N, K, sms, block_n, block_k)
    piece = triton.cdiv(K, split)
    step = min(block_k, max(16, triton.next_power_of_2(piece)))
    k_split = triton.cdiv(piece, step) * step
    return {"SPLIT": triton.cdiv(K, k_split), "K_SPLIT": k_split, "BLOCK_N": block_n, "BLOCK_K": step,
            "num_warps": max(1, min(8, block_n * step // 512))}


def device_sms(device: torch.device) -> int:
    """SMs of a CUDA device (132 on an H200) or of the GPU compiled for (`triton_helpers.gpu_of`); 1 under
    the interpreter, which runs one program at a time."""
    gpu = helpers.gpu_of(device)
    return 1 if gpu is None else gpu.sms


def _check(x: torch.Tensor, weight: torch.Tensor, split) -> tuple[int, int, torch.device]:
    """Validate one token against a weight; returns (N, K, device)."""
    validate.tensor(weight, "weight", dtype=validate.FLOATS, ndim=2)
    N, K = weight.shape
    validate.tensor(x, "x", dtype=weight.dtype)
    if x.dim() not in (1, 2) or x.shape[-1] != K or (x.dim() == 2 and x.shape[0] != 1):
        raise ValueError(f"x has shape {list(x.shape)}; split-K GEMV takes one token, [{K}] or [1, {K}] "
                         f"(K = {K}, the second dimension of weight {list(weight.shape)})")
    if K == 0:
        raise ValueError(f"weight has shape {list(weight.shape)}: there is no K to split")
    if split is not None and (isinstance(split, bool) or not isinstance(split, int) or split < 1):
        raise ValueError(f"split must be a positive int (or None to choose it), got {split!r}")
    return N, K, validate.same_device(x=x, weight=weight)


def _config(N: int, K: int, split, device: torch.device) -> dict:
    return splitk_config(N, K, split, device_sms(device), runtime().interpreted)


def _launch_pieces(kernel, x, weight, target, cfg):
    N, K = weight.shape
    grid = (triton.cdiv(N, cfg["BLOCK_N"]), cfg["SPLIT"])
    kernel[grid](x, weight, target, N, K, cfg["K_SPLIT"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"],
                 num_warps=cfg["num_warps"])


def _reduce(parts: torch.Tensor, out: torch.Tensor, split: int, clear: bool) -> None:
    """Stage 2 over parts [>= split, N]: about 2048 fp32 values per program (16 per thread)."""
    N = out.shape[-1]
    split_p2 = triton.next_power_of_2(split)
    block = min(triton.next_power_of_2(N), max(16, 2048 // split_p2))
    splitk_reduce_kernel[(triton.cdiv(N, block),)](parts, out, N, split, SPLIT_P2=split_p2, BLOCK=block,
                                                   CLEAR=clear, num_warps=4)


def splitk_gemv(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None,
                split: int | None = None, partials: torch.Tensor | None = None) -> torch.Tensor:
    """One token through a projection, split along K, reduced in two deterministic stages.

    x:        [K] or [1, K], same dtype as weight (fp32, fp16 or bf16)
    weight:   [N, K] row-major (nn.Linear layout)
    out:      optional [N] or [1, N] buffer (x's leading shape)
    split:    pieces of K (None: `choose_split` for this GPU); see `splitk_config` for the number used
    partials: optional fp32 workspace [S, N] with S >= the number of pieces (allocated when None)
    returns y of shape x.shape[:-1] + [N]: fp32 partial sums, added in a fixed order, then cast.
    """
    N, K, device = _check(x, weight, split)
    out = validate.output(out, "out", (*x.shape[:-1], N), x.dtype, device)
    if N == 0:
        return out
    cfg = _config(N, K, split, device)
    if partials is None:
        partials = torch.empty(cfg["SPLIT"], N, dtype=torch.float32, device=device)
    validate.tensor(partials, "partials", dtype=torch.float32, ndim=2, device=device.type)
    if partials.shape[1] != N or partials.shape[0] < cfg["SPLIT"]:
        raise ValueError(f"partials has shape {list(partials.shape)}; expected [S, {N}] with "
                         f"S >= {cfg['SPLIT']}, the number of pieces of K")
    validate.disjoint({"out": out, "partials": partials}, {"x": x, "weight": weight})
    _launch_pieces(splitk_partial_kernel, x, weight, partials, cfg)
    _reduce(partials, out, cfg["SPLIT"], clear=False)
    return out


def splitk_gemv_atomic(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None,
                       split: int | None = None, acc: torch.Tensor | None = None) -> torch.Tensor:
    """One token through a projection, split along K, the pieces added with fp32 atomics.

    x, weight, out, split: as in `splitk_gemv`
    acc: optional fp32 [N] accumulator that holds zeros (None: a fresh zeroed one). The second step
         casts it into `out` and writes zeros back, so a buffer kept from call to call stays ready. A
         call that stops between the two steps leaves it dirty: zero it again before the next call.
    returns y of shape x.shape[:-1] + [N]; its low bits may differ from run to run on a GPU.
    """
    N, K, device = _check(x, weight, split)
    out = validate.output(out, "out", (*x.shape[:-1], N), x.dtype, device)
    if acc is None:
        acc = torch.zeros(N, dtype=torch.float32, device=device)
    validate.tensor(acc, "acc", dtype=torch.float32, shape=(N,), device=device.type)
    validate.disjoint({"out": out, "acc": acc}, {"x": x, "weight": weight})
    if N == 0:
        return out
    _launch_pieces(splitk_atomic_kernel, x, weight, acc, _config(N, K, split, device))
    _reduce(acc, out, 1, clear=True)
    return out


@functools.cache
def _linear_kernel(name: str):
    """Chapter 05_projections's `gemm` / `gemv` (the learner's when written, else the solution), looked up once."""
    return kernels.get("linear", name)


def splitk_linear(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """`x @ weight.T` for x [..., K], with the reference `linear`'s signature (swappable into the model).

    Several tokens: chapter 05_projections's GEMM. One token: split-K (two stages) where `choose_split` splits this
    shape on this GPU, else chapter 05_projections's GEMV (one piece needs no second stage).
    returns [..., N] in x's dtype (into `out` when given).
    """
    K = validate.projection(x, weight)
    N = weight.shape[0]
    device = validate.same_device(x=x, weight=weight)
    out = validate.output(out, "out", (*x.shape[:-1], N), x.dtype, device)
    validate.disjoint({"out": out}, {"x": x, "weight": weight})
    M = math.prod(x.shape[:-1])                                       # tokens
    x2, out2 = x.reshape(M, K), out.view(M, N)                        # [M, K], [M, N]
    if x2.shape[0] != 1:
        _linear_kernel("gemm")(x2, weight, out2)
    elif N == 0 or K == 0 or _config(N, K, None, device)["SPLIT"] == 1:
        _linear_kernel("gemv")(x2, weight, out2)
    else:
        splitk_gemv(x2, weight, out2)
    return out
