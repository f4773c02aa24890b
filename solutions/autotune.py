"""Autotuned projections (chapter 26_autotune): chapter 05_projections's decode GEMV and prefill GEMM, their launch
parameters chosen by measuring on the GPU at hand instead of by hand.

`@triton.autotune(configs=..., key=...)` wraps a kernel. The first call with a new value of the key (here
the weight's N and K, and for the GEMM the prompt length's bucket; Triton adds the dtypes of the tensor
arguments) runs every config that survives pruning, times each with `do_bench`, and caches the fastest
for that key; every later call with that key launches the cached one straight away.

- `gemv_configs`: the GEMV's search space around chapter 05_projections's hand-picked tiles (2 rows, 16 elements a
  thread), which it contains, so tuning can only match or beat them on the autotuner's own timing.
- `select_gemv_configs`: the pruning rule, run before any benchmark: no step along K wider than K needs,
  and no grid with fewer programs than the GPU has SMs.
- `bucket_m`: the GEMM's tuning key for a prompt of M tokens. Keyed on M itself, every new prompt length
  would be tuned again; keyed on its power-of-two bucket, a handful of tunings cover every length.
- Benchmarking runs each config on the caller's buffers: harmless here, every config writes the same `out`.
  A kernel that accumulates or updates in place needs `reset_to_zero=` / `restore_value=` (chapter 26_autotune).

Under the CPU interpreter there is no GPU to time: the course patches a CPU timer into the autotuner
(`runtime._install_cpu_benchmarker`), so the mechanics (pruning, benchmarking, caching) run as on a GPU,
but the choice means nothing. Programs run one after another there at about the same cost whatever their size,
so the interpreter tunes among a few big tiles (`INTERPRETER_*_CONFIGS`) instead of the GPU's small ones.
"""
import math
import os

import torch
import triton
import triton.language as tl
import triton.testing

from tritonllm_course import kernels, triton_helpers as helpers, validate

# chapter 05_projections's walks along K, from the learner's linear.py once written (`kernels.jit_function`)
gemv_rows = kernels.jit_function("linear", "gemv_rows", __file__)
linear_tile = kernels.jit_function("linear", "linear_tile", __file__)

# The interpreter's spaces: few programs of many rows (the GPU's 1-to-8-row tiles would take seconds per
# config there); three configs each, so that pruning, tuning and the cache still happen there.
INTERPRETER_GEMV_CONFIGS = [triton.Config({"BLOCK_N": bn, "BLOCK_K": bk})
                            for bn, bk in ((32, 128), (64, 64), (64, 128))]
INTERPRETER_GEMM_CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": 64, "BLOCK_K": 64}) for bm in (16, 32, 64)]


def gemv_configs() -> list[triton.Config]:
    """The GEMV's search space on a GPU: tiles of BLOCK_N rows x BLOCK_K columns per step.

    Chapter 05_projections measured 2 rows and 16 elements per thread (two 16-byte loads of bf16) as best, with a
    BLOCK_K of 512 to 2048 depending on the shape. Around it: 1 to 8 rows, BLOCK_K 512, 1024 or 2048, and
    8 or 16 elements per thread, which sets num_warps = BLOCK_N x BLOCK_K / (32 x elements), kept to 1-16
    warps. num_stages (software pipelining, for loads feeding tl.dot) stays at its default of 3.
    """
    # BEGIN SOLUTION: triton.Config({"BLOCK_N": ..., "BLOCK_K": ...}, num_warps=...) over rows, widths, elements/thread
    configs = []
    for block_n in (1, 2, 4, 8):
        for block_k in (512, 1024, 2048):
            for per_thread in (16, 8):
                warps = block_n * block_k // (32 * per_thread)
                if 1 <= warps <= 16:
                    configs.append(triton.Config({"BLOCK_N": block_n, "BLOCK_K": block_k}, num_warps=warps))
    return configs
    # END SOLUTION


def select_gemv_configs(configs: list[triton.Config], N: int, K: int, sms: int) -> list[triton.Config]:
    """The configs worth timing for an [N, K] weight on a GPU with `sms` SMs (the pruning rule), in order.

    1. BLOCK_K at most K rounded up to a power of two: a wider step is all masked lanes. (When every
       config is wider, the narrowest ones stay.)
    2. At least one program per SM: cdiv(N, BLOCK_N) >= sms, or some SMs have no rows to read. (When no
       config reaches that, those with the fewest rows per program, that is the most programs, stay.)
    """
    # BEGIN SOLUTION: rule 1 with triton.next_power_of_2, then rule 2 with triton.cdiv; never return an empty list
    widest = max(triton.next_power_of_2(K), min(c.kwargs["BLOCK_K"] for c in configs))
    fit = [c for c in configs if c.kwargs["BLOCK_K"] <= widest]
    busy = [c for c in fit if triton.cdiv(N, c.kwargs["BLOCK_N"]) >= sms]
    if busy:
        return busy
    fewest = min(c.kwargs["BLOCK_N"] for c in fit)
    return [c for c in fit if c.kwargs["BLOCK_N"] == fewest]
    # END SOLUTION


def bucket_m(M: int) -> int:
    """The GEMM's tuning key for a prompt of M tokens: M rounded up to a power of two, at least 16 (the
    smallest tile). Prompts of 65 to 128 tokens share one tuned config, 129 to 256 the next."""
    # BEGIN SOLUTION: one line: at least 16, else the next power of two
    return max(16, triton.next_power_of_2(M))
    # END SOLUTION


def gemm_configs() -> list[triton.Config]:
    """The prefill GEMM's search space on a GPU: (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages).

    Chapter 05_projections's three hand-picked configs (M < 256 with N < 4096 or N >= 4096; M >= 256), thinner and
    wider tiles beside them, and 16- and 32-row tiles for short prompts. Every side >= 16 (tl.dot).
    """
    tiles = [(16, 64, 128, 4, 4), (32, 64, 128, 4, 4), (64, 32, 128, 4, 5), (64, 64, 128, 4, 4),
             (64, 128, 64, 4, 4), (128, 64, 128, 8, 4), (128, 128, 64, 8, 3), (128, 256, 64, 8, 3)]
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=s)
            for bm, bn, bk, w, s in tiles]


def gemm_shared_bytes(config: triton.Config, itemsize: int) -> int:
    """Shared memory of a GEMM config with `itemsize`-byte inputs: num_stages x (an x tile and a W tile).

    An upper bound of what Triton allocates for this kernel (compiled for sm_90, every config of the space
    in fp32, fp16 and bf16): the pipeliner holds at most num_stages - 1 stages of tiles (fp32
    [128, 64, 128] at 4 stages takes 294,912 bytes, 3 stages' worth), and the epilogue's layout
    conversion reuses that memory."""
    tiles = (config.kwargs["BLOCK_M"] + config.kwargs["BLOCK_N"]) * config.kwargs["BLOCK_K"]
    return config.num_stages * tiles * itemsize


def select_gemm_configs(configs: list[triton.Config], m_bucket: int, K: int, shared_bytes: int,
                        itemsize: int) -> list[triton.Config]:
    """The GEMM configs worth timing: BLOCK_M no taller than the prompt's bucket (taller tiles multiply
    rows of padding), BLOCK_K no wider than K needs, and the pipeline's tiles (`gemm_shared_bytes`)
    inside the shared memory. When none is left, the config with the smallest tiles."""
    widest = max(triton.next_power_of_2(K), min(c.kwargs["BLOCK_K"] for c in configs))
    keep = [c for c in configs if c.kwargs["BLOCK_M"] <= m_bucket and c.kwargs["BLOCK_K"] <= widest
            and gemm_shared_bytes(c, itemsize) <= shared_bytes]
    return keep or [min(configs, key=lambda c: gemm_shared_bytes(c, itemsize))]


def device_limits(device: torch.device) -> tuple[int, int]:
    """(SMs, shared memory bytes a program may use) of `device`, or of the GPU compiled for
    (`triton_helpers.gpu_of`): (132, 232448) on an H200, (40, 65536) on a T4. Under the interpreter
    (1, unlimited): one program runs at a time, in plain memory. The pruning reads them, so a config that
    does not fit this GPU is never tried."""
    gpu = helpers.gpu_of(device)
    return (1, 1 << 40) if gpu is None else (gpu.sms, gpu.shared_bytes)


def _prune_gemv(configs, named_args, **kwargs):
    """`early_config_prune`: the autotuner passes its configs and the launch's arguments by name."""
    sms, _ = device_limits(named_args["w_ptr"].device)
    return select_gemv_configs(configs, named_args["N"], named_args["K"], sms)


def _prune_gemm(configs, named_args, **kwargs):
    w = named_args["w_ptr"]
    _, shared = device_limits(w.device)
    return select_gemm_configs(configs, named_args["M_BUCKET"], named_args["K"], shared, w.element_size())


def _quick_bench(kernel_call, quantiles):
    """How the autotuner times one config: Triton's do_bench (L2 flushed before every run, CUDA-event times)
    with `warmup=5, rep=25` (milliseconds of warm-up and of runs) instead of its defaults `25` and `100`. A kernel
    of a few microseconds still gets hundreds of timed runs, and tuning a key takes a quarter of the time."""
    return triton.testing.do_bench(kernel_call, warmup=5, rep=25, quantiles=quantiles)


_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"     # what @triton.jit itself reads: the CPU interpreter


@triton.autotune(configs=INTERPRETER_GEMV_CONFIGS if _INTERPRETED else gemv_configs(), key=["N", "K"],
                 prune_configs_by={"early_config_prune": _prune_gemv}, do_bench=_quick_bench)
@triton.jit
def gemv_autotuned_kernel(x_ptr, w_ptr, y_ptr, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """y[n] = sum_k W[n, k] x[k] for this program's BLOCK_N rows; x [K], W [N, K], y [N]."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    y = gemv_rows(x_ptr, w_ptr, rows, N, K, 0, K, BLOCK_N, BLOCK_K)                   # fp32 [BLOCK_N]
    tl.store(y_ptr + rows, y.to(y_ptr.dtype.element_ty), mask=rows < N)


@triton.autotune(configs=INTERPRETER_GEMM_CONFIGS if _INTERPRETED else gemm_configs(),
                 key=["M_BUCKET", "N", "K"], prune_configs_by={"early_config_prune": _prune_gemm},
                 do_bench=_quick_bench)
@triton.jit
def gemm_autotuned_kernel(x_ptr, w_ptr, y_ptr, M, N, K, M_BUCKET,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """y[M, N] = x[M, K] @ W[N, K].T, one BLOCK_M x BLOCK_N tile per program. M_BUCKET = bucket_m(M) is
    only the tuning key: the kernel never reads it."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)    # axis 0 walks M: neighbours share W tiles
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = linear_tile(x_ptr, w_ptr, rm, rn, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K)        # fp32 [BLOCK_M, BLOCK_N]
    y_ptrs = y_ptr + rm[:, None].to(tl.int64) * N + rn[None, :]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=(rm < M)[:, None] & (rn < N)[None, :])


def _check(x: torch.Tensor, weight: torch.Tensor) -> tuple[int, int, torch.device]:
    """Validate x [..., K] against weight [N, K]; returns (N, K, device)."""
    K = validate.projection(x, weight)
    return weight.shape[0], K, validate.same_device(x=x, weight=weight)


def autotuned_gemv(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """One token through a projection, `x @ weight.T`, with the tile tuned for (N, K, dtype) on first use.

    x:      [K] or [1, K], same dtype as weight (fp32, fp16 or bf16)
    weight: [N, K] row-major (nn.Linear layout)
    out:    optional [N] or [1, N] buffer (x's leading shape)
    returns y of shape x.shape[:-1] + [N], computed with fp32 accumulation.
    The first call per key benchmarks the configs (and synchronises): make it before any CUDA-graph capture.
    """
    N, K, device = _check(x, weight)
    if x.dim() > 2 or (x.dim() == 2 and x.shape[0] != 1):
        raise ValueError(f"autotuned_gemv takes one token, x of shape [K] or [1, K]; got {list(x.shape)} "
                         "(use autotuned_gemm or autotuned_linear for several tokens)")
    out = validate.output(out, "out", (*x.shape[:-1], N), x.dtype, device)
    validate.disjoint({"out": out}, {"x": x, "weight": weight})
    if N == 0:
        return out
    gemv_autotuned_kernel[lambda meta: (triton.cdiv(N, meta["BLOCK_N"]),)](x, weight, out, N, K)
    return out


def autotuned_gemm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """M tokens through a projection, `x @ weight.T`, with tensor-core tiles tuned per (bucket_m(M), N, K, dtype).

    x:      [M, K], same dtype as weight
    weight: [N, K] row-major
    out:    optional [M, N] buffer
    returns y [M, N], computed with fp32 accumulation.
    """
    N, K, device = _check(x, weight)
    if x.dim() != 2:
        raise ValueError(f"autotuned_gemm takes x of shape [M, K]; got {list(x.shape)}")
    M = x.shape[0]
    out = validate.output(out, "out", (M, N), x.dtype, device)
    validate.disjoint({"out": out}, {"x": x, "weight": weight})
    if M == 0 or N == 0:
        return out

    def grid(meta):
        return triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"])

    gemm_autotuned_kernel[grid](x, weight, out, M, N, K, bucket_m(M))
    return out


def autotuned_linear(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """`x @ weight.T` for x [..., K]: the autotuned GEMV for one token, the autotuned GEMM for several.

    Same signature as the reference `linear`, so it can replace it in the model.
    returns [..., N] in x's dtype (into `out` when given).
    """
    N, K, device = _check(x, weight)
    out = validate.output(out, "out", (*x.shape[:-1], N), x.dtype, device)
    validate.disjoint({"out": out}, {"x": x, "weight": weight})
    M = math.prod(x.shape[:-1])                                       # tokens
    x2, out2 = x.reshape(M, K), out.view(M, N)                        # [M, K], [M, N]
    if M == 1:
        autotuned_gemv(x2, weight, out2)
    else:
        autotuned_gemm(x2, weight, out2)
    return out
