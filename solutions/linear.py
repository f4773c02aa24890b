"""Projections: `y = x @ W.T` as a decode GEMV and a prefill GEMM (chapters 05_projections and 11_lm_head).

Every projection of Qwen3.5 is a bias-free nn.Linear: weight [N, K] row-major (one row per output),
y[m, n] = sum_k x[m, k] * W[n, k].

- Decode (one token, M = 1) is a GEMV. Each weight element is used once, so the kernel streams the
  weight matrix and its speed is HBM bandwidth. A program owns BLOCK_N consecutive rows of W and walks
  along K in BLOCK_K chunks: every load is a contiguous, vectorisable piece of a row, and x (a few KB)
  stays in L1/L2.
- Prefill (M tokens) is a GEMM. A program owns a BLOCK_M x BLOCK_N tile of y: every weight tile it loads
  serves BLOCK_M tokens through `tl.dot` on the tensor cores, so at large M it is compute-bound.
- `linear` picks one by M.
- On sm_90 and newer, prompts from `tritonllm_course.tma_gemm.MIN_M` tokens on run the same GEMM with its
  tiles copied by the TMA (`tritonllm_course.tma_gemm`):
  1.2<!-- fig:code.tma_gemm.tma_over_pointer.min -->-1.4x<!-- fig:code.tma_gemm.tma_over_pointer.max --> faster
  than this GEMM at its best tiles at 1,024 and 4,096 tokens on an H200 (lab/prompt_gemm_sweep.py).

The block sizes are explicit functions of the shape (`gemv_config`, `gemm_config`), chosen from
measurements on an H200 in bf16; chapter 05_projections shows the reasoning.
"""
import torch
import triton
import triton.language as tl

from tritonllm_course import tma_gemm, triton_helpers as helpers, validate
from tritonllm_course.runtime import pdl_args, runtime
from tritonllm_course.triton_helpers import pdl_enter

SMS = 132  # streaming multiprocessors of an H200 (and an H100 SXM): the grids are sized against them
# A GEMV of more programs than this launches without PDL: at the LM head's tile the PDL calls take it from
# 114.7 us<!-- fig:code.linear.lm_head_tile.plain.us --> to 152.2 us<!-- fig:code.linear.lm_head_tile.pdl_calls.us -->
# on an H200, and no tile is as fast with them; the overlap would hide only its first wave (lab/pdl_variants_probe.py)
PDL_MAX_PROGRAMS = 64 * SMS


@triton.jit
def gemv_rows(x_ptr, w_ptr, rows, N, K, k_lo, k_hi, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """sum over k in [k_lo, k_hi) of W[n, k] * x[k] for the BLOCK_N rows `rows`: fp32 [BLOCK_N] (0 past N).

    W [N, K] row-major, x [K]: the GEMV's walk along a row (the whole row, [0, K), for the GEMV here; one
    piece of it for chapter 24_split_k's split-K, which takes it from here, as do the fused and autotuned GEMVs).
    Each step loads a contiguous BLOCK_K piece of every row (vectorised loads); one fp32 partial sum per
    lane, reduced across lanes once at the end, not in every step.
    """
    # BEGIN SOLUTION: walk k_lo .. k_hi in BLOCK_K steps: an x piece [BLOCK_K] and a W tile [BLOCK_N, BLOCK_K]
    #   (rows past N and columns past k_hi masked), fp32 products summed per lane; one sum across lanes at the end
    row_ok = rows < N
    row_start = w_ptr + rows.to(tl.int64) * K           # int64: N * K may exceed 2**31 for big heads
    cols = tl.arange(0, BLOCK_K)
    # keep one fp32 partial sum per lane and reduce once at the end: no cross-thread sum inside the loop
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        k = k0 + cols
        k_ok = k < k_hi
        x = tl.load(x_ptr + k, mask=k_ok, other=0.0).to(tl.float32)                      # [BLOCK_K]
        # the weight is read exactly once: evict_first keeps it from pushing x out of the caches
        w = tl.load(row_start[:, None] + k[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0,
                    eviction_policy="evict_first").to(tl.float32)                       # [BLOCK_N, BLOCK_K]
        acc += w * x[None, :]
    return tl.sum(acc, axis=1)
    # END SOLUTION


@triton.jit
def gemv_kernel(x_ptr, w_ptr, y_ptr, N, K,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr = False):
    """y[n] = sum_k W[n, k] x[k] for this program's BLOCK_N rows; x [K], W [N, K], y [N]."""
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    # BEGIN SOLUTION: this program's rows; gemv_rows over the whole row [0, K); store them in y's dtype
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    y = gemv_rows(x_ptr, w_ptr, rows, N, K, 0, K, BLOCK_N, BLOCK_K)                     # fp32 [BLOCK_N]
    tl.store(y_ptr + rows, y.to(y_ptr.dtype.element_ty), mask=rows < N)
    # END SOLUTION


@triton.jit
def linear_tile(x_ptr, w_ptr, rm, rn, M, N, K,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """x[rm, :] @ W[rn, :].T for the BLOCK_M rows `rm` of x [M, K] and the BLOCK_N rows `rn` of W [N, K]:
    fp32 [BLOCK_M, BLOCK_N] (0 outside M and N).

    The prefill GEMM's walk along K (the GEMM here; the fused and autotuned GEMMs of chapters 22_layer_fusion,
    26_autotune and 28_compilers take it from here): each step an x tile [BLOCK_M, BLOCK_K] and a W.T tile [BLOCK_K,
    BLOCK_N] read in place, multiplied by `tl.dot` in the input dtype, summed in fp32.
    """
    # BEGIN SOLUTION: over K: an x tile [BM, BK], a W.T tile [BK, BN] (masked past M, N and K), tl.dot into fp32
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < M
    n_ok = rn < N
    x_ptrs = x_ptr + rm[:, None].to(tl.int64) * K + rk[None, :]          # [BLOCK_M, BLOCK_K]
    w_ptrs = w_ptr + rn[None, :].to(tl.int64) * K + rk[:, None]          # [BLOCK_K, BLOCK_N]: W read as W.T
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + rk) < K
        # operands stay in the input dtype: bf16/fp16 go to the tensor cores, the sum is fp32 (acc)
        a = tl.load(x_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(w_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        # "ieee": fp32 inputs are multiplied in full fp32, not rounded to tf32 (no effect on bf16/fp16)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    return acc
    # END SOLUTION


@triton.jit
def gemm_kernel(x_ptr, w_ptr, y_ptr, M, N, K,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr = False):
    """y[M, N] = x[M, K] @ W[N, K].T, one BLOCK_M x BLOCK_N tile of y per program."""
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    # BEGIN SOLUTION: tile offsets (axis 0: M rows, axis 1: N columns); linear_tile; store the tile in y's dtype
    pid_m = tl.program_id(0)      # axis 0 is M: programs that share a weight tile run side by side (L2)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = linear_tile(x_ptr, w_ptr, rm, rn, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K)          # fp32 [BLOCK_M, BLOCK_N]
    y_ptrs = y_ptr + rm[:, None].to(tl.int64) * N + rn[None, :]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=(rm < M)[:, None] & (rn < N)[None, :])
    # END SOLUTION


def gemv_config(N: int, K: int, interpreted: bool = False) -> dict:
    """Launch parameters of the GEMV for an [N, K] weight (measured on an H200 in bf16, chapter 05_projections).

    Two rows per program and 16 elements per thread (two 16-byte loads of bf16) in every shape. The
    width of a step along K sets the size of a program: the few-row matrices (N = 1024, K up to 3584)
    want wide programs (BLOCK_K up to 2048, 8 warps), the 248,320-row LM head narrow ones (512, 2 warps):
    it has enough programs to fill every SM many times over, and small ones leave a shorter tail.
    Under the CPU interpreter programs run one after another at a few ms each, whatever their size:
    there, 64 rows per program.
    """
    block_n = 64 if interpreted else 2
    many_programs = triton.cdiv(N, block_n) >= 64 * SMS
    block_k = min(512 if many_programs else 2048, max(16, triton.next_power_of_2(K)))
    return {"BLOCK_N": block_n, "BLOCK_K": block_k, "num_warps": max(1, block_n * block_k // (16 * 32))}


def gemm_config(M: int, N: int, K: int, dtype: torch.dtype, device: torch.device) -> dict:
    """Launch parameters of the GEMM (measured on an H200 in bf16, chapter 05_projections).

    Tensor-core tiles (every side >= 16). At prompt lengths near 128 the GEMM is still close to
    memory-bound (intensity ~ M FLOP/byte): one or two M tiles, long K steps (BLOCK_K = 128) and a deep
    pipeline; the narrow 1024-row matrices take thin 32-column tiles to make more programs. From
    M = 256 on it is compute-bound: square 128 x 128 tiles.
    """
    block_m = min(128, max(16, triton.next_power_of_2(M)))
    if M >= 256:
        cfg = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}
    elif N >= 4096:
        cfg = {"BLOCK_M": block_m, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 8, "num_stages": 4}
    else:
        cfg = {"BLOCK_M": min(64, block_m), "BLOCK_N": 32, "BLOCK_K": 128, "num_warps": 4, "num_stages": 5}
    # each pipeline stage holds an x tile and a W tile in shared memory: fewer stages on smaller GPUs
    stage_bytes = (cfg["BLOCK_M"] + cfg["BLOCK_N"]) * cfg["BLOCK_K"] * dtype.itemsize
    cfg["num_stages"] = max(1, min(cfg["num_stages"], _shared_memory(device) // stage_bytes))
    return cfg


def _shared_memory(device: torch.device) -> int:
    """Bytes of shared memory a program may use on this device, or on the GPU compiled for
    (`triton_helpers.gpu_of`); unlimited under the interpreter."""
    if not helpers.gpu_launch(device):
        return 1 << 30
    return helpers.shared_memory(device.index)


def gemv(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """One token through a projection: `x @ weight.T`.

    x:      [K] or [1, K], same dtype as weight (fp32, fp16 or bf16)
    weight: [N, K] row-major (nn.Linear layout)
    out:    optional [N] or [1, N] buffer (x's leading shape)
    returns y of shape x.shape[:-1] + [N], computed with fp32 accumulation.
    """
    K = validate.projection(x, weight)
    if x.dim() > 2 or (x.dim() == 2 and x.shape[0] != 1):
        raise ValueError(f"gemv takes one token, x of shape [K] or [1, K]; got {list(x.shape)} "
                         "(use gemm or linear for several tokens)")
    device = validate.same_device(x=x, weight=weight)
    N = weight.shape[0]
    out = validate.output(out, "out", (*x.shape[:-1], N), x.dtype, device)
    validate.disjoint({"out": out}, {"x": x, "weight": weight})
    if N == 0 or K == 0:
        return out.zero_()          # no output, or sums of no terms: nothing to launch
    cfg = gemv_config(N, K, runtime().interpreted)
    grid = (triton.cdiv(N, cfg["BLOCK_N"]),)
    pdl = pdl_args() if grid[0] <= PDL_MAX_PROGRAMS else {"PDL": False, "launch_pdl": False}
    gemv_kernel[grid](x, weight, out, N, K, BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"],
                      num_warps=cfg["num_warps"], **pdl)
    return out


def gemm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """M tokens through a projection: `x @ weight.T` with tensor-core tiles.

    x:      [M, K], same dtype as weight
    weight: [N, K] row-major
    out:    optional [M, N] buffer
    returns y [M, N], computed with fp32 accumulation.
    """
    K = validate.projection(x, weight)
    if x.dim() != 2:
        raise ValueError(f"gemm takes x of shape [M, K]; got {list(x.shape)}")
    device = validate.same_device(x=x, weight=weight)
    M, N = x.shape[0], weight.shape[0]
    out = validate.output(out, "out", (M, N), x.dtype, device)
    validate.disjoint({"out": out}, {"x": x, "weight": weight})
    if M == 0 or N == 0 or K == 0:
        return out.zero_()          # no output, or sums of no terms: nothing to launch
    if tma_gemm.usable(x, weight):      # sm_90 on, from tritonllm_course.tma_gemm.MIN_M tokens: the TMA's copies
        return tma_gemm.launch(x, weight, out, pdl=pdl_args())
    cfg = gemm_config(M, N, K, x.dtype, device)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]), triton.cdiv(N, cfg["BLOCK_N"]))
    gemm_kernel[grid](x, weight, out, M, N, K, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
                      BLOCK_K=cfg["BLOCK_K"], num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **pdl_args())
    return out


def linear(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """`x @ weight.T` for x [..., K]: the GEMV for one token, the GEMM for several.

    Same signature as the reference `linear`, so it can replace it in the model.
    returns [..., N] in x's dtype (into `out` when given).
    """
    K = validate.projection(x, weight)
    N = weight.shape[0]
    device = validate.same_device(x=x, weight=weight)
    out = validate.output(out, "out", (*x.shape[:-1], N), x.dtype, device)
    validate.disjoint({"out": out}, {"x": x, "weight": weight})
    M = x.shape[:-1].numel()                    # not -1, which an empty K or N leaves undetermined
    x2, out2 = x.reshape(M, K), out.view(M, N)                        # [M, K], [M, N]
    if x2.shape[0] == 1:
        gemv(x2, weight, out2)
    else:
        gemm(x2, weight, out2)
    return out
