"""Projections with 8-bit weights: a dequantizing GEMV for decode and a dequantizing GEMM for the prompt
(chapter 31_weight_quant).

The weight is stored as q [N, K] (int8, or fp8 e4m3 on sm_89+) with fp32 scales, one per row (per
channel, `scale [N]`) or one per row and `group_size` columns (per group, `scale [N, ceil(K / group_size)]`);
`y = x @ (q * scale).T` (tritonllm_course/reference/quant.py). The activations stay in bf16/fp16/fp32.

- Decode (M = 1) is a GEMV bound by the weight bytes: 8-bit weights halve them. The kernel loads q,
  converts it in registers (an int8 load sign-extends, an fp8 load widens; both exactly, to fp32) and
  multiplies with x in fp32. Per channel the scale factors out of the row's sum and is applied once, at
  the end; per group it scales each K step's tile: one scale a row where the step lies inside one group,
  each column's own (s[row, k // group_size]) where it spans several, as the narrow wide-K projections'
  steps do (`gemv_config`). An 8-bit row tile is half the bytes of a bf16 one: the LM head takes 16 rows a program in
  steps of 256 (`gemv_config`, measured).
- Prefill (M >= 2 tokens, in tiles of at least 16 rows) is a GEMM on the tensor cores. The tile of q is
  converted to x's dtype (exact: int8 and e4m3 values are all representable in fp16 and bf16) and goes to
  `tl.dot` unscaled; per channel the scales multiply the output tile's columns once, after the K loop; per
  group, each K step's product, before it joins the fp32 accumulator. On sm_90 and newer, prompts from
  `tritonllm_course.tma_gemm.MIN_M` tokens on with one scale a row run the same tile through the TMA
  (`tma_gemm`, SCALED: the 8-bit tile widened in registers, the scales after the K loop), as chapter
  05_projections's `gemm` does in bf16.

fp8 needs no special case under the CPU interpreter: its loads and conversions are exact there in triton
3.5, 3.7 and 3.9 (tests/kernels/test_quant.py, in `make test-window`).

The GEMV's block sizes are measured (lab/quant_gemv_sweep.py); the GEMM's are chosen, not swept
(lab/quant_gemm_probe.py times only `gemm_config`'s pick).
"""
import torch
import triton
import triton.language as tl

from tritonllm_course import tma_gemm, triton_helpers as helpers, validate
from tritonllm_course.runtime import pdl_args, runtime
from tritonllm_course.triton_helpers import FP8_CAPABILITY, pdl_enter

SMS = 132  # streaming multiprocessors of an H200: the GEMV's grid is sized against them
WEIGHT_DTYPES = validate.EIGHT_BIT   # int8, fp8 e4m3
# a GEMV of more programs than this launches without PDL, as the bf16 GEMV does (solutions/linear.py)
PDL_MAX_PROGRAMS = 64 * SMS


@triton.jit
def quant_gemv_kernel(x_ptr, w_ptr, s_ptr, y_ptr, N, K, GROUPS, GROUP: tl.constexpr,
                      BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr = False):
    """y[n] = sum_k (q[n, k] * scale) x[k] for this program's BLOCK_N rows; x [K], q [N, K], y [N].

    GROUP = 0: one scale per row, s [N]; else s [N, GROUPS], one per GROUP columns (both powers of two: a step
    lies inside one group, or spans BLOCK_K // GROUP whole groups).
    """
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    # BEGIN SOLUTION: rows of this program; per K step load q (8-bit) and x, both to fp32; scale (per group), sum
    #   per channel the scale multiplies each row's sum once, after the loop; per group, each step's tile: one
    #   scale a row when BLOCK_K <= GROUP, else each column's s[row, k // GROUP]
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    row_start = w_ptr + rows.to(tl.int64) * K           # int64: N * K may exceed 2**31 for big heads
    cols = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for k_step in range(0, K, BLOCK_K):
        k = k_step + cols
        k_ok = k < K
        # the weight tile first: it is the load that takes long, x is in cache. `.to(tl.float32)` on an int8
        # load sign-extends (-1 stays -1, not 255); on an fp8 load it widens the e4m3 value exactly
        q = tl.load(row_start[:, None] + k[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0,
                    eviction_policy="evict_first").to(tl.float32)                      # [BLOCK_N, BLOCK_K]
        x = tl.load(x_ptr + k, mask=k_ok, other=0.0).to(tl.float32)                      # [BLOCK_K]
        if GROUP > 0 and BLOCK_K <= GROUP:
            # this step lies inside one group: one scale per row for all its columns
            s = tl.load(s_ptr + rows.to(tl.int64) * GROUPS + k_step // GROUP, mask=row_ok, other=0.0)
            q = q * s[:, None]
        elif GROUP > 0:
            # this step spans several groups: each column's scale, loaded beside its weight (a row's few scales
            # come from L1)
            s = tl.load(s_ptr + rows.to(tl.int64)[:, None] * GROUPS + (k // GROUP)[None, :],
                        mask=row_ok[:, None] & k_ok[None, :], other=0.0)                 # [BLOCK_N, BLOCK_K]
            q = q * s
        acc += q * x[None, :]
    y = tl.sum(acc, axis=1)                                                             # [BLOCK_N]
    if GROUP == 0:
        y = y * tl.load(s_ptr + rows, mask=row_ok, other=0.0)
    tl.store(y_ptr + rows, y.to(y_ptr.dtype.element_ty), mask=row_ok)
    # END SOLUTION


@triton.jit
def quant_gemm_kernel(x_ptr, w_ptr, s_ptr, y_ptr, M, N, K, GROUPS, GROUP: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      PDL: tl.constexpr = False):
    """y[M, N] = x[M, K] @ (q[N, K] * scale).T, one BLOCK_M x BLOCK_N tile of y per program.

    GROUP = 0: s [N], one scale per output column; else s [N, GROUPS] (BLOCK_K divides GROUP).
    """
    pdl_enter(PDL)
    # BEGIN SOLUTION: tile offsets; over K: x tile, q.T tile converted to x's dtype, tl.dot; scales per group / column
    pid_m = tl.program_id(0)      # axis 0 is M: programs that share a weight tile run side by side (L2)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < M
    n_ok = rn < N
    x_ptrs = x_ptr + rm[:, None].to(tl.int64) * K + rk[None, :]          # [BLOCK_M, BLOCK_K]
    w_ptrs = w_ptr + rn[None, :].to(tl.int64) * K + rk[:, None]          # [BLOCK_K, BLOCK_N]: q read as q.T
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + rk) < K
        a = tl.load(x_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        # 8 bits to x's dtype in registers, exactly; the tensor cores then see an ordinary bf16/fp16 tile
        b = tl.load(w_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0).to(a.dtype)
        if GROUP > 0:
            s = tl.load(s_ptr + rn.to(tl.int64) * GROUPS + k0 // GROUP, mask=n_ok, other=0.0)   # [BLOCK_N]
            acc += tl.dot(a, b, input_precision="ieee") * s[None, :]
        else:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    if GROUP == 0:
        acc = acc * tl.load(s_ptr + rn, mask=n_ok, other=0.0)[None, :]   # a weight row's scale: y's column
    # END SOLUTION
    y_ptrs = y_ptr + rm[:, None].to(tl.int64) * N + rn[None, :]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


def gemv_config(N: int, K: int, group_size: int | None, interpreted: bool = False) -> dict:
    """Launch parameters of the dequantizing GEMV, measured on an H200 (lab/quant_gemv_sweep.py, 2026-12-05,
    int8 and fp8 with row scales at the decode shapes, each config against the first pick of 4 rows and 32
    weights a thread).

    The LM head (enough programs to fill every SM many times over): 16 rows in steps of 256 on 4 warps, about
    two thirds of the first pick's time and 80%<!-- fig:ch31.lmhead.int8.best.pct --> (int8) to
    88%<!-- fig:ch31.lmhead.fp8.best.pct --> (fp8) of its own floor. K up to 1024: 4 rows in steps of 512 on
    2 warps; wider K: 2 rows in steps of 2048 on 4 warps; each about a tenth faster than the first pick, and still
    at 18%<!-- fig:code.quant.small_gemvs.min_pct -->-46%<!-- fig:code.quant.small_gemvs.max_pct -->
    of their floors: at 2-8 MB a call, launch and ramp-up dominate.

    Per group (lab/quant_group_probe.py, H100, 2026-12-06, int8 in groups of 128): where K is wide and the rows
    few (K > 1024 outside the LM head) the per-channel step stays and spans several groups, each column's scale
    loaded beside its weight: 5.8<!-- fig:ch31.group_probe.down.spans.us --> against
    21.5 us<!-- fig:ch31.group_probe.down.as_is.us --> at the down projection for steps of one group on 32 rows,
    3.6<!-- fig:ch31.group_probe.o_proj.spans.us --> against 12.4<!-- fig:ch31.group_probe.o_proj.as_is.us --> at
    o_proj (few programs: each step must move many bytes). Elsewhere a step lies inside one group, on the
    per-channel rows: the LM head 90.7<!-- fig:ch31.group_probe.lm_head.one_group.us --> against
    95.3 us<!-- fig:ch31.group_probe.lm_head.as_is.us -->,
    6.7<!-- fig:code.quant.group_probe.attention.one_group.us -->-7.4<!-- fig:ch31.group_probe.in_proj.one_group.us -->
    against 7.6<!-- fig:code.quant.group_probe.attention.as_is.us -->-8.0<!-- fig:ch31.group_probe.in_proj.as_is.us -->
    at K = 1024 (gathering the scales there was slower, 216.7 us<!-- fig:ch31.group_probe.lm_head.spans.us --> at
    the LM head). Under the CPU interpreter programs run one after another at a few ms each, whatever their size:
    64 rows there, the same rule for groups.
    """
    warps = None   # None: 32 weights a thread
    if interpreted:
        block_n, block_k = 64, (1024 if triton.cdiv(N, 64) >= 64 * SMS else 2048)
    elif triton.cdiv(N, 4) >= 64 * SMS:
        block_n, block_k, warps = 16, 256, 4
    elif K <= 1024:
        block_n, block_k, warps = 4, 512, 2
    else:
        block_n, block_k, warps = 2, 2048, 4
    block_k = min(block_k, max(16, triton.next_power_of_2(K)))
    spans_groups = K > 1024 and triton.cdiv(N, 4) < 64 * SMS    # wide K, few rows: long steps over several groups
    if group_size is not None and block_k > group_size and not spans_groups:
        block_k, warps = group_size, None
    if warps is None:
        warps = max(1, min(8, block_n * block_k // (32 * 32)))
    return {"BLOCK_N": block_n, "BLOCK_K": block_k, "num_warps": warps}


def gemm_config(M: int, N: int, group_size: int | None, dtype: torch.dtype, device: torch.device) -> dict:
    """Launch parameters of the dequantizing GEMM (chosen, not swept: lab/quant_gemm_probe.py times only this pick).

    The bf16 GEMM's tiles (chapter 05_projections): at prompt lengths near 128 one or two M tiles, 64 or 32 columns,
    long K steps; square 128 x 128 tiles from M = 256. A step stays inside one group (BLOCK_K <= group_size),
    and every side is at least 16 (`tl.dot`).
    """
    block_m = min(128, max(16, triton.next_power_of_2(M)))
    if M >= 256:
        cfg = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}
    elif N >= 4096:
        cfg = {"BLOCK_M": block_m, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 8, "num_stages": 4}
    else:
        cfg = {"BLOCK_M": min(64, block_m), "BLOCK_N": 32, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4}
    if group_size is not None:
        cfg["BLOCK_K"] = min(cfg["BLOCK_K"], group_size)
    if helpers.gpu_launch(device):   # stages: an x tile and an 8-bit weight tile each, in shared memory
        stage_bytes = cfg["BLOCK_M"] * cfg["BLOCK_K"] * dtype.itemsize + cfg["BLOCK_N"] * cfg["BLOCK_K"]
        cfg["num_stages"] = max(1, min(cfg["num_stages"], helpers.shared_memory(device.index) // stage_bytes))
    return cfg


def _check(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, group_size) -> tuple[int, int, int]:
    """Validate a quantized projection's inputs; returns (N, K, scales per row)."""
    validate.tensor(weight, "weight", dtype=WEIGHT_DTYPES, ndim=2)
    N, K = weight.shape
    validate.tensor(x, "x", dtype=validate.FLOATS)
    if x.dim() == 0 or x.shape[-1] != K:
        raise ValueError(f"x has shape {list(x.shape)}; its last dimension must be K = {K}, "
                         f"the second dimension of weight {list(weight.shape)}")
    if group_size is None:
        groups = 1
        validate.tensor(scale, "scale", dtype=torch.float32, shape=(N,))
    else:
        if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 16 \
                or group_size & (group_size - 1):
            raise ValueError(f"group_size must be a power of two >= 16 (a K step lies inside one group), "
                             f"got {group_size!r}")
        if weight.dtype != torch.int8:
            raise ValueError("per-group scales are for int8 weights; fp8 takes one scale per row (group_size=None)")
        groups = triton.cdiv(K, group_size)
        validate.tensor(scale, "scale", dtype=torch.float32, shape=(N, groups))
    device = validate.same_device(x=x, weight=weight, scale=scale)
    gpu = helpers.gpu_of(device)
    if weight.dtype == torch.float8_e4m3fn and gpu is not None and not gpu.fp8:
        raise ValueError(f"fp8 e4m3 weights need an sm_{FP8_CAPABILITY}+ GPU; this one ({gpu.name}) is "
                         f"sm_{gpu.capability}: quantize to int8 instead")
    return N, K, groups


def quant_gemv(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, group_size: int | None = None,
               out: torch.Tensor | None = None) -> torch.Tensor:
    """One token through a projection with an 8-bit weight: `x @ (weight * scale).T`.

    x:      [K] or [1, K], fp32, fp16 or bf16
    weight: [N, K] int8 or float8_e4m3fn, row-major
    scale:  [N] fp32 (group_size None) or [N, ceil(K / group_size)] fp32 (int8 only)
    out:    optional [N] or [1, N] buffer in x's dtype (x's leading shape)
    returns y of shape x.shape[:-1] + [N], computed with fp32 accumulation.
    """
    N, K, groups = _check(x, weight, scale, group_size)
    if x.dim() > 2 or (x.dim() == 2 and x.shape[0] != 1):
        raise ValueError(f"quant_gemv takes one token, x of shape [K] or [1, K]; got {list(x.shape)} "
                         "(use quant_gemm or quant_linear for several tokens)")
    device = x.device
    out = validate.output(out, "out", (*x.shape[:-1], N), x.dtype, device)
    validate.disjoint({"out": out}, {"x": x, "weight": weight, "scale": scale})
    if N == 0 or K == 0:                        # no output, or sums of no term: no launch (a grid of 0, or K = 0)
        return out.zero_()
    cfg = gemv_config(N, K, group_size, runtime().interpreted)
    grid = (triton.cdiv(N, cfg["BLOCK_N"]),)
    pdl = pdl_args() if grid[0] <= PDL_MAX_PROGRAMS else {"PDL": False, "launch_pdl": False}
    quant_gemv_kernel[grid](x, weight, scale, out, N, K, groups, GROUP=group_size or 0,
                            BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], num_warps=cfg["num_warps"], **pdl)
    return out


def quant_gemm(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, group_size: int | None = None,
               out: torch.Tensor | None = None) -> torch.Tensor:
    """M tokens through a projection with an 8-bit weight, on the tensor cores.

    x: [M, K]; weight, scale: as `quant_gemv`; out: optional [M, N] buffer in x's dtype.
    returns y [M, N], computed with fp32 accumulation.
    """
    N, K, groups = _check(x, weight, scale, group_size)
    if x.dim() != 2:
        raise ValueError(f"quant_gemm takes x of shape [M, K]; got {list(x.shape)}")
    M, device = x.shape[0], x.device
    out = validate.output(out, "out", (M, N), x.dtype, device)
    validate.disjoint({"out": out}, {"x": x, "weight": weight, "scale": scale})
    if M == 0 or N == 0 or K == 0:              # no output, or sums of no term
        return out.zero_()
    if group_size is None and tma_gemm.usable(x, weight):   # sm_90 on, long prompts: the TMA's copies
        return tma_gemm.launch(x, weight, out, scale=scale, pdl=pdl_args())
    cfg = gemm_config(M, N, group_size, x.dtype, device)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]), triton.cdiv(N, cfg["BLOCK_N"]))
    quant_gemm_kernel[grid](x, weight, scale, out, M, N, K, groups, GROUP=group_size or 0,
                            BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"],
                            num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **pdl_args())
    return out


def quant_linear(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, group_size: int | None = None,
                 out: torch.Tensor | None = None) -> torch.Tensor:
    """`x @ (weight * scale).T` for x [..., K]: the GEMV for one token, the GEMM for several.

    Same signature as the reference `quant_linear` (plus `out`). returns [..., N] in x's dtype.
    """
    N, K, _ = _check(x, weight, scale, group_size)
    out = validate.output(out, "out", (*x.shape[:-1], N), x.dtype, x.device)
    validate.disjoint({"out": out}, {"x": x, "weight": weight, "scale": scale})
    M = x.shape[:-1].numel()                    # not -1, which an empty K or N leaves undetermined
    x2, out2 = x.reshape(M, K), out.view(M, N)                        # [M, K], [M, N]
    if x2.shape[0] == 1:
        quant_gemv(x2, weight, scale, group_size, out2)
    else:
        quant_gemm(x2, weight, scale, group_size, out2)
    return out
