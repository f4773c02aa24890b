"""The prompt's GEMMs with their operand tiles copied by the Tensor Memory Accelerator (TMA), on GPUs that have
one (sm_90 on): chapter 05_projections's GEMM, chapter 21_norm_fusion's gate/up + SwiGLU and chapter
22_layer_fusion's GEMM + residual take it from `MIN_M` tokens on.

Chapter 05_projections's tile (`linear_tile`) computes the address of every element of its x and W tiles and
masks the edges; on sm_80 and sm_90 Triton turns those loads into asynchronous copies, one per thread and 16
bytes. A tensor descriptor names the whole matrix once (base, shape, strides) on the host; in the kernel
`desc.load([row, col])` asks the TMA for one [rows, cols] tile: one instruction for the whole tile, no address
arithmetic or masks in the loop (the hardware zero-fills past the matrix's edges), and the warps are free for
the tensor cores while the copies of the next stages run. The epilogues stay the course's: the SwiGLU of two
accumulators, the residual added in fp32 before the one rounding.

Measured on an H200 in bf16 (lab/prompt_gemm_sweep.py, its records in lab/results/): at M = 1,024 and 4,096 this
kernel is 1.2<!-- fig:code.tma_gemm.tma_over_pointer.min -->-1.4x<!-- fig:code.tma_gemm.tma_over_pointer.max -->
faster than the pointer form at its best tiles, and level with or ahead of cuBLAS (`torch.addmm`) on the GEMM +
residual from 1,024 tokens on
(0.97<!-- fig:code.tma_gemm.residual_vs_addmm.min -->-1.12x<!-- fig:code.tma_gemm.residual_vs_addmm.max -->);
at 128 and 512 tokens
0.64<!-- fig:code.tma_gemm.vs_cublas.m128_512.min -->-0.96x<!-- fig:code.tma_gemm.vs_cublas.m128_512.max -->
of cuBLAS's speed. In each of the 24 cases of the two H200 sweeps (M = 128 to 4,096), `config` picks tiles among
the fastest TMA tiles measured: `tests/kernels/test_tma_gemm.py` holds them within
3%<!-- not-measured: the test's tolerance --> of the fastest.

Not taken (`usable`): below sm_90 (no TMA: a T4, an A100, an L4), on a triton without host tensor descriptors,
under the interpreter unless asked for (the tests ask), for dtypes other than fp16/bf16, and for operands whose
base or row stride is not a multiple of 16 bytes or whose rows are not contiguous (the TMA's rules).
"""
import torch
import triton
import triton.language as tl

from . import triton_helpers as helpers, validate
from .triton_helpers import pdl_enter, silu

try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:            # a triton without host-side tensor descriptors: the pointer kernels run
    TensorDescriptor = None

MIN_M = 256                    # prompts shorter than this keep chapter 05_projections's tiles
TMA_CAPABILITY = 90            # the first compute capability with a TMA
FP8 = getattr(torch, "float8_e4m3fn", None)   # chapter 31_weight_quant's fp8 weights (`fp8_config`)
WAVE_MARGIN = 0.05             # how much more of the SMs 64-row tiles must keep busy to be taken over 128-row ones


@triton.jit
def _accumulator(BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SWAP_AB: tl.constexpr):
    """fp32 zeros of the product's tile: [BLOCK_M, BLOCK_N], or its transpose under SWAP_AB."""
    if SWAP_AB:
        acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    return acc


@triton.jit
def _weight_dot(a, w, acc, SWAP_AB: tl.constexpr):
    """acc + a w^T for an x tile a [BLOCK_M, BLOCK_K] and a weight tile w [BLOCK_N, BLOCK_K] as stored (its
    transpose is a view the tensor cores read as is), w widened to a's dtype (nothing unless 8-bit); under
    SWAP_AB acc + w a^T, the widened weight the tensor cores' first operand. "ieee": fp32 operands (the CPU
    tests) in full fp32; no effect on bf16/fp16."""
    if SWAP_AB:
        acc = tl.dot(w.to(a.dtype), tl.trans(a), acc, input_precision="ieee")
    else:
        acc = tl.dot(a, tl.trans(w.to(a.dtype)), acc, input_precision="ieee")
    return acc


@triton.jit
def _row_scaled(acc, s_ptr, n0, N, BLOCK_N: tl.constexpr, SWAP_AB: tl.constexpr):
    """acc times the scales s[n0 ..] of its weight rows: acc's columns, or its rows under SWAP_AB."""
    rn = n0 + tl.arange(0, BLOCK_N)
    s = tl.load(s_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)
    if SWAP_AB:
        acc = acc * s[:, None]
    else:
        acc = acc * s[None, :]
    return acc


@triton.jit
def tma_tile(x_desc, w_desc, up_desc, s_ptr, su_ptr, m0, n0, N, K, GATED: tl.constexpr, SCALED: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SWAP_AB: tl.constexpr = False):
    """fp32 [BLOCK_M, BLOCK_N]: rows m0.. of x [M, K] times rows n0.. of W [N, K], transposed, through tensor
    descriptors of [BLOCK_M, BLOCK_K] and [BLOCK_N, BLOCK_K] tiles (zeros past the edges); GATED: silu of that
    times the same product with W_up. SCALED: W (and W_up) hold 8-bit weights (int8 or fp8 e4m3, chapter
    31_weight_quant), widened to x's dtype in registers, exactly, and each weight row's product times its
    scale s[n] (su[n] for W_up), once after the sum over K and before the SwiGLU. The walk along K shared by the
    kernels that read through the TMA.

    SWAP_AB computes the transpose, W x^T, and transposes the tile once at the end. The tensor cores (wgmma)
    read their first operand from registers or shared memory, the second from shared memory only: a weight
    tile widened in registers is then used where it is; as the second operand it would be written back to
    shared memory, fenced, at every step. It needs BLOCK_N a multiple of 64 (wgmma's rows)."""
    acc = _accumulator(BLOCK_M, BLOCK_N, SWAP_AB)
    if GATED:
        acc_up = _accumulator(BLOCK_M, BLOCK_N, SWAP_AB)
    for k0 in range(0, K, BLOCK_K):
        a = x_desc.load([m0, k0])                                                   # [BLOCK_M, BLOCK_K]
        acc = _weight_dot(a, w_desc.load([n0, k0]), acc, SWAP_AB)
        if GATED:
            acc_up = _weight_dot(a, up_desc.load([n0, k0]), acc_up, SWAP_AB)
    if SCALED:
        acc = _row_scaled(acc, s_ptr, n0, N, BLOCK_N, SWAP_AB)
        if GATED:
            acc_up = _row_scaled(acc_up, su_ptr, n0, N, BLOCK_N, SWAP_AB)
    if GATED:
        acc = silu(acc) * acc_up
    if SWAP_AB:
        acc = tl.trans(acc)                                                         # [BLOCK_M, BLOCK_N]
    return acc


@triton.jit
def store_tile(acc, res_ptr, y_ptr, m0, n0, M, N, RESIDUAL: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The epilogue: y [M, N] rows m0.., columns n0.. = acc (fp32), plus res [M, N] under RESIDUAL, rounded once
    to y's dtype (y may be res)."""
    rm = m0 + tl.arange(0, BLOCK_M)
    rn = n0 + tl.arange(0, BLOCK_N)
    offs = rm[:, None].to(tl.int64) * N + rn[None, :]                               # [BLOCK_M, BLOCK_N]
    ok = (rm < M)[:, None] & (rn < N)[None, :]
    if RESIDUAL:
        acc += tl.load(res_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, acc.to(y_ptr.dtype.element_ty), mask=ok)


@triton.jit
def tma_gemm_kernel(x_desc, w_desc, up_desc, s_ptr, su_ptr, res_ptr, y_ptr, M, N, K,
                    GATED: tl.constexpr, RESIDUAL: tl.constexpr, SCALED: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    SWAP_AB: tl.constexpr = False, PDL: tl.constexpr = False):
    """The BLOCK_M x BLOCK_N tile of y [M, N] (program_id(0) along M, (1) along N) = x [M, K] @ W [N, K].T,
    with GATED: silu(x W.T) * (x W_up.T); with RESIDUAL: + res [M, N] (y may be res: the stream in place);
    SCALED: W and W_up 8-bit with a scale a row, s [N] and su [N]; SWAP_AB: W x^T, transposed (`tma_tile`)."""
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    m0 = tl.program_id(0) * BLOCK_M    # axis 0 is M: the programs sharing a weight tile run side by side (L2)
    n0 = tl.program_id(1) * BLOCK_N
    acc = tma_tile(x_desc, w_desc, up_desc, s_ptr, su_ptr, m0, n0, N, K, GATED, SCALED, BLOCK_M, BLOCK_N, BLOCK_K,
                   SWAP_AB)
    store_tile(acc, res_ptr, y_ptr, m0, n0, M, N, RESIDUAL, BLOCK_M, BLOCK_N)


def _aligned(t: torch.Tensor) -> bool:
    """The TMA's rules for a 2-D operand: rows contiguous, base and row stride multiples of 16 bytes."""
    return (t.dim() == 2 and t.stride(1) == 1 and (t.stride(0) * t.element_size()) % 16 == 0
            and t.data_ptr() % 16 == 0)


def usable(x: torch.Tensor, *weights: torch.Tensor, interpreted_too: bool = False) -> bool:
    """Whether the prompt GEMM of x [M, K] with `weights` [N, K] (in x's dtype, or all 8-bit,
    `validate.EIGHT_BIT`, then with scales) may run `tma_gemm_kernel` (see the module's docstring);
    `interpreted_too`: also under the CPU interpreter (the tests)."""
    if TensorDescriptor is None or x.shape[0] < MIN_M or x.dtype not in (torch.bfloat16, torch.float16):
        return False
    if not (all(w.dtype == x.dtype for w in weights) or all(w.dtype in validate.EIGHT_BIT for w in weights)):
        return False
    gpu = helpers.gpu_of(x.device)
    if gpu is None:
        if not interpreted_too:
            return False
    elif gpu.capability < TMA_CAPABILITY:
        return False
    return all(_aligned(t) for t in (x, *weights))


def _wave_use(tiles: int, sms: int) -> float:
    """The share of the SMs' program slots that `tiles` programs fill over their waves (1.0: no idle tail)."""
    return tiles / (triton.cdiv(tiles, sms) * sms)


def config(M: int, N: int, gated: bool, dtype: torch.dtype, device: torch.device,
           weight_dtype: torch.dtype | None = None) -> dict:
    """Tiles of `tma_gemm_kernel`, from the H200's sweeps at M = 128 to 4,096 (lab/prompt_gemm_sweep.py, whose
    records `tests/kernels/test_tma_gemm.py` holds each pick against): 128 x 128 on 4 warps and 3 stages,
    128 x 64 gated (two accumulators). 64-row tiles where 128-row ones make less than a wave: 128-deep steps on 4
    stages up to 1,024 rows, 64-deep above, and 64 columns while even those fill half the SMs at most. Ungated,
    64-row tiles also where their waves leave clearly fewer SMs idle (the 5,120-wide in-projection at 512 and
    1,024 tokens: 1.2 and 2.4 waves of 128-row tiles); gated 64 x 64 tiles lost there. Stages capped by shared
    memory. fp8 weights (ungated, chapter 31_weight_quant's product): `fp8_config`."""
    gpu = helpers.gpu_of(device)
    sms = (gpu or helpers.GPUS[TMA_CAPABILITY]).sms       # the interpreter (tests): an H100 / H200's
    if weight_dtype == FP8 and not gated:
        return fp8_config(M, N, sms)
    block_n = 64 if gated else 128
    cfg = {"BLOCK_M": 128, "BLOCK_N": block_n, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3}
    tiles, half_tiles = triton.cdiv(M, 128) * triton.cdiv(N, block_n), triton.cdiv(M, 64) * triton.cdiv(N, block_n)
    if tiles < sms:
        cfg.update(BLOCK_M=64, BLOCK_K=128 if M <= 1024 else 64, num_stages=4)
        if not gated and half_tiles <= sms // 2:
            cfg["BLOCK_N"] = 64
    elif not gated and _wave_use(half_tiles, sms) > _wave_use(tiles, sms) + WAVE_MARGIN:
        cfg["BLOCK_M"] = 64
    if gpu is not None:
        stage = (cfg["BLOCK_M"] + (2 if gated else 1) * cfg["BLOCK_N"]) * cfg["BLOCK_K"] * dtype.itemsize
        cfg["num_stages"] = max(1, min(cfg["num_stages"], gpu.shared_bytes // stage))
    return cfg


def fp8_config(M: int, N: int, sms: int) -> dict:
    """Tiles of the fp8 product, computed as W x^T (`SWAP_AB`: BLOCK_N weight rows, BLOCK_M tokens). Widened from
    fp8 to bf16 in registers, the weight tile stays there as wgmma's register operand, where x W^T writes it back
    to shared memory at every K step. On the H200 (lab/quant_gemm_probe.py; its record in lab/results/, the figures
    in lab/README.md) W x^T at these tiles made the fast level's fp8 time to the first token shorter at 1,024
    and 4,096 tokens: 128 x 128 tiles, and 64 x 64 x 128 ones on 4 stages where 128 x 128 tiles make less than a
    wave (at 1,024 tokens and more among the fastest tiles measured at every shape: `tests/kernels/test_tma_gemm.py`
    holds them within 5%<!-- not-measured: the test's tolerance --> of the fastest). int8 keeps x W^T: swapped,
    its time to the first token was no shorter."""
    cfg = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3, "SWAP_AB": True}
    if triton.cdiv(M, 128) * triton.cdiv(N, 128) < sms:
        cfg.update(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, num_stages=4)
    return cfg


def descriptors(x: torch.Tensor, weight: torch.Tensor, up: torch.Tensor | None, cfg: dict) -> tuple:
    """The (x, W, W_up) tensor descriptors of config `cfg`'s tiles ([BLOCK_M, BLOCK_K], [BLOCK_N, BLOCK_K]);
    without `up`, W's stands in for it (the kernel reads it only when GATED)."""
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    w_desc = TensorDescriptor.from_tensor(weight, [bn, bk])
    up_desc = w_desc if up is None else TensorDescriptor.from_tensor(up, [bn, bk])
    return TensorDescriptor.from_tensor(x, [bm, bk]), w_desc, up_desc


def launch(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, up: torch.Tensor | None = None,
           residual: torch.Tensor | None = None, pdl: dict | None = None, cfg: dict | None = None,
           scale: torch.Tensor | None = None, up_scale: torch.Tensor | None = None) -> torch.Tensor:
    """out [M, N] = x [M, K] @ weight [N, K].T (with `up`: silu(that) * x @ up.T; with `residual` [M, N]: plus
    it, out may be residual) through `tma_gemm_kernel`; arguments already checked by the caller, `usable` true.
    scale, up_scale: [N] fp32, the row scales of 8-bit `weight` and `up` (both or neither where gated).
    pdl: the launch's PDL arguments (`runtime.pdl_args()`), none by default; cfg: tiles, warps and stages, and
    SWAP_AB where given (default `config`'s; lab/prompt_gemm_sweep.py and lab/quant_gemm_probe.py time others)."""
    M, K = x.shape
    N = weight.shape[0]
    cfg = config(M, N, up is not None, x.dtype, x.device, weight.dtype) if cfg is None else cfg
    grid = (triton.cdiv(M, cfg["BLOCK_M"]), triton.cdiv(N, cfg["BLOCK_N"]))
    scaled = scale is not None
    s = scale if scaled else out                  # not read unless SCALED
    tma_gemm_kernel[grid](*descriptors(x, weight, up, cfg), s, s if up_scale is None else up_scale,
                          out if residual is None else residual, out, M, N, K,
                          GATED=up is not None, RESIDUAL=residual is not None, SCALED=scaled,
                          BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"],
                          SWAP_AB=cfg.get("SWAP_AB", False), num_warps=cfg["num_warps"],
                          num_stages=cfg["num_stages"], **(pdl or {}))
    return out
