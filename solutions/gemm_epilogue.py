"""A projection with its activation fused into the epilogue (chapter 28_compilers): `y = gelu(x @ W.T)` in one kernel.

Unfused, a GEMM writes its [M, N] output to HBM and an elementwise kernel reads it back, applies GELU and
writes it again: two extra passes over the output and a second launch. Fused, each program applies the
activation to its fp32 tile of sums while they are still in registers, and stores once.

- `gemm_gelu_kernel`: the source article's kernel in the course's layout (W [N, K], nn.Linear's), one
  BLOCK_M x BLOCK_N tile of y per program, chapter 05_projections's walk along K with `tl.dot` (`linear_tile`), then
  the epilogue.
- `gemv_gelu_kernel`: one token (M = 1): chapter 05_projections's walk along the weight's rows (`gemv_rows`), the same
  epilogue. A tensor-core tile would compute 15 rows of padding for every row of the token.
- `gelu_kernel`: GELU alone, elementwise: the unfused pair's second kernel, timed in chapter 28_compilers.
- The epilogue (`activation`, ACT a compile-time constant): 0 none (the plain projection, to time what the
  epilogue itself costs), 1 GELU with `tl.math.erf`, 2 the tanh form. Triton 3 has no `tl.math.tanh`;
  the tanh form is written with the sigmoid, since 0.5 * (1 + tanh(u)) = sigmoid(2u): one exponential,
  and a sigmoid that saturates to 0 or 1 for any |u| where (e^2u - 1) / (e^2u + 1) is inf / inf = NaN.

Launch parameters (`gemm_gelu_config`, `gemv_gelu_config`) are chapter 05_projections's, chosen there on an H200 in
bf16; chapter 28_compilers measures the fused kernels against cuBLAS plus `torch.nn.functional.gelu`
(`tritonllm_course/measure/compiler_bench.py`).
"""
import torch
import triton
import triton.language as tl

from tritonllm_course import kernels, validate
from tritonllm_course.runtime import runtime
from tritonllm_course.triton_helpers import sigmoid

# chapter 05_projections's walks along K, from the learner's linear.py once written (`kernels.jit_function`)
gemv_rows = kernels.jit_function("linear", "gemv_rows", __file__)
linear_tile = kernels.jit_function("linear", "linear_tile", __file__)

ACTS = {"linear": 0, "gelu": 1, "gelu_tanh": 2}  # the kernels' ACT
APPROXIMATE = {"none": "gelu", "tanh": "gelu_tanh"}   # torch.nn.functional.gelu's names


@triton.jit
def gelu_erf(x):
    """GELU of fp32 x: x * Phi(x), Phi the standard normal CDF."""
    # BEGIN SOLUTION: 0.5 * x * (1 + erf(x / sqrt(2))) with tl.math.erf
    return 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))        # 1 / sqrt(2)
    # END SOLUTION


@triton.jit
def gelu_tanh(x):
    """The tanh form of GELU of fp32 x: 0.5 * x * (1 + tanh(u)), u = sqrt(2 / pi) * (x + 0.044715 x^3)."""
    # BEGIN SOLUTION: u, then 0.5 * (1 + tanh(u)) written as sigmoid(2u) (triton_helpers.sigmoid): no NaN at large |u|
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)                  # sqrt(2 / pi) = 0.79788...
    return x * sigmoid(2.0 * u)
    # END SOLUTION


@triton.jit
def activation(x, ACT: tl.constexpr):
    """The epilogue's function of fp32 sums (ACTS): 0 none, 1 GELU (erf), 2 GELU (tanh form)."""
    if ACT == 1:
        x = gelu_erf(x)
    if ACT == 2:
        x = gelu_tanh(x)
    return x


@triton.jit
def gemm_gelu_kernel(x_ptr, w_ptr, y_ptr, M, N, K, ACT: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """y[M, N] = act(x[M, K] @ W[N, K].T), one BLOCK_M x BLOCK_N tile of y per program, grid (M tiles, N tiles)."""
    # BEGIN SOLUTION: this program's rows rm (axis 0) and columns rn (axis 1); chapter 05_projections's `linear_tile`
    #   walks K into one fp32 accumulator
    pid_m = tl.program_id(0)      # axis 0 is M: programs that share a weight tile run side by side (L2)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = linear_tile(x_ptr, w_ptr, rm, rn, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K)          # fp32 [BLOCK_M, BLOCK_N]
    # END SOLUTION
    # BEGIN SOLUTION: the epilogue, on the finished fp32 sums: `activation(acc, ACT)`, then one masked store of
    #   the tile, in y's dtype (y is [M, N] row-major)
    y = activation(acc, ACT)
    y_ptrs = y_ptr + rm[:, None].to(tl.int64) * N + rn[None, :]
    tl.store(y_ptrs, y.to(y_ptr.dtype.element_ty), mask=(rm < M)[:, None] & (rn < N)[None, :])
    # END SOLUTION


@triton.jit
def gemv_gelu_kernel(x_ptr, w_ptr, y_ptr, N, K, ACT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One token: y[n] = act(sum_k W[n, k] x[k]) for this program's BLOCK_N rows. Given complete: chapter
    05_projections's GEMV with the GEMM's epilogue."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = gemv_rows(x_ptr, w_ptr, rows, N, K, 0, K, BLOCK_N, BLOCK_K)                  # fp32 [BLOCK_N]
    tl.store(y_ptr + rows, activation(acc, ACT).to(y_ptr.dtype.element_ty), mask=rows < N)


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n, ACT: tl.constexpr, BLOCK: tl.constexpr):
    """y = act(x) elementwise over n values, BLOCK per program: the unfused pair's second kernel."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    x = tl.load(x_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, activation(x, ACT).to(y_ptr.dtype.element_ty), mask=ok)


def gemv_gelu_config(N: int, K: int, interpreted: bool = False) -> dict:
    """Chapter 05_projections's GEMV tiles (`linear.gemv_config`)."""
    return kernels.get("linear", "gemv_config")(N, K, interpreted)


def gemm_gelu_config(M: int, N: int, K: int, dtype: torch.dtype, device: torch.device) -> dict:
    """Chapter 05_projections's GEMM tiles (`linear.gemm_config`: every side >= 16 for tl.dot, the pipeline's stages
    capped by shared memory). Under the interpreter few, large tiles."""
    if device.type != "cuda":
        block_m = min(64, max(16, triton.next_power_of_2(M)))
        return {"BLOCK_M": block_m, "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4, "num_stages": 1}
    return kernels.get("linear", "gemm_config")(M, N, K, dtype, device)


def _act(act: str) -> int:
    if act not in ACTS:
        raise ValueError(f"act must be one of {sorted(ACTS)}, got {act!r}")
    return ACTS[act]


def _approximate(approximate: str) -> str:
    if approximate not in APPROXIMATE:
        raise ValueError(f"approximate must be 'none' (erf) or 'tanh', got {approximate!r}")
    return APPROXIMATE[approximate]


def linear_act(x: torch.Tensor, weight: torch.Tensor, act: str = "gelu", out: torch.Tensor | None = None,
               config: dict | None = None) -> torch.Tensor:
    """`act(x @ weight.T)` in one kernel, act one of ACTS ("linear": the projection alone).

    x:      [M, K] float, contiguous, weight's dtype
    weight: [N, K] row-major (nn.Linear layout)
    out:    optional [M, N] buffer in x's dtype
    config: launch parameters; None picks by M (the GEMV for one token, chapter 05_projections's GEMM tiles otherwise);
            a dict with BLOCK_M runs the GEMM with those tiles at any M (the article's 128 x 128 x 32 included)
    """
    code = _act(act)
    K = validate.projection(x, weight)
    if x.dim() != 2:
        raise ValueError(f"x must be [M, K], got shape {list(x.shape)}")
    device = validate.same_device(x=x, weight=weight)
    M, N = x.shape[0], weight.shape[0]
    out = validate.output(out, "out", (M, N), x.dtype, device)
    validate.disjoint({"out": out}, {"x": x, "weight": weight})
    if config is not None and not {"BLOCK_M", "BLOCK_N", "BLOCK_K"} <= set(validate.tile_config(config)):
        raise ValueError(f"config must give BLOCK_M, BLOCK_N and BLOCK_K, got {sorted(config)}")
    if M == 0 or N == 0:
        return out
    if config is None and M == 1:
        cfg = gemv_gelu_config(N, K, runtime().interpreted)
        gemv_gelu_kernel[(triton.cdiv(N, cfg["BLOCK_N"]),)](x, weight, out, N, K, ACT=code, BLOCK_N=cfg["BLOCK_N"],
                                                            BLOCK_K=cfg["BLOCK_K"], num_warps=cfg["num_warps"])
        return out
    cfg = config or gemm_gelu_config(M, N, K, x.dtype, device)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]), triton.cdiv(N, cfg["BLOCK_N"]))
    gemm_gelu_kernel[grid](x, weight, out, M, N, K, ACT=code, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
                           BLOCK_K=cfg["BLOCK_K"], num_warps=cfg.get("num_warps", 4),
                           num_stages=cfg.get("num_stages", 3))
    return out


def gelu_linear(x: torch.Tensor, weight: torch.Tensor, approximate: str = "none",
                out: torch.Tensor | None = None) -> torch.Tensor:
    """`gelu(x @ weight.T)` with the GELU in the epilogue; the reference `gelu_linear`'s signature.

    x [M, K], weight [N, K] (same dtype); approximate "none" (erf) or "tanh"; out optional [M, N].
    The sums are fp32 and the GELU is applied to them before the one rounding to x's dtype (the unfused
    pair rounds the projection first).
    """
    return linear_act(x, weight, _approximate(approximate), out)


def gelu(x: torch.Tensor, approximate: str = "none", out: torch.Tensor | None = None) -> torch.Tensor:
    """GELU elementwise: x any shape, contiguous, float; computed in fp32, rounded once to x's dtype."""
    code = ACTS[_approximate(approximate)]
    validate.tensor(x, "x", dtype=validate.FLOATS)
    device = validate.same_device(x=x)
    out = validate.output(out, "out", tuple(x.shape), x.dtype, device)
    validate.disjoint({"out": out}, {"x": x}, same=("x",))
    n = x.numel()
    if n:
        block = 1024
        gelu_kernel[(triton.cdiv(n, block),)](x, out, n, ACT=code, BLOCK=block, num_warps=4)
    return out
