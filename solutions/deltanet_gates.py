"""The DeltaNet gates and the L2 norm of q and k (chapter 14_gates_l2norm): the small operators around the delta rule.

Gates, per (token, value head):
    beta = sigmoid(b)                                   the write strength, in (0, 1)
    g    = -exp(A_log) * softplus(a + dt_bias)          the log-decay (<= 0), fp32: exp(g) scales the state
One program handles BLOCK consecutive elements of the flat [T * HV] arrays; the head of element i is
i % HV (A_log and dt_bias are per head), its token i // HV (b and a may be column slices of a wider
projection output: read at their token strides). T * HV is 16 at decode and 2,048 at a 128-token
prefill: this kernel is launch-bound at any real size, so it is written for one launch and nothing else.

L2 norm, per (token, key head) row of 128:
    q <- q / sqrt(sum(q^2) + eps) * D^-0.5,   k <- k / sqrt(sum(k^2) + eps)
One launch for both: grid axis 1 picks q (0) or k (1); each program normalises BLOCK_R whole rows held
in registers. q and k usually arrive as views of the conv output [T, 6144] (row stride 6144, head stride
128), so the kernel takes the token and head strides; outputs are contiguous.

The two are independent (different inputs), so fusing them would only save a launch. In the decode path
the L2 norm pays more inside the conv kernel, which already holds each head of q and k in registers
(solutions/conv1d.py, `conv1d_l2norm_*`); the gates' natural home is the delta-rule kernel, which reads
a and b per head anyway.
"""
import torch
import triton
import triton.language as tl

from tritonllm_course import validate
from tritonllm_course.runtime import pdl_args
from tritonllm_course.triton_helpers import l2_normalize_rows, pdl_enter, sigmoid, softplus


@triton.jit
def deltanet_gates_kernel(b_ptr, a_ptr, A_log_ptr, dt_bias_ptr, beta_ptr, g_ptr, n, HV, sb, sa,
                          BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    """Flat outputs [T * HV]; b and a are read at token stride sb and sa (views into a wider projection)."""
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    # BEGIN SOLUTION: flat indices i < n = T * HV, their token i // HV and head i % HV;
    #   load b[token, head], a[token, head] (token strides sb, sa), A_log[head], dt_bias[head] as fp32;
    #   store beta = sigmoid(b) (beta's dtype) and g = -exp(A_log) * softplus(a + dt_bias) (fp32) at i
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = i < n
    token, head = i // HV, i % HV
    b = tl.load(b_ptr + token * sb + head, mask=mask, other=0.0).to(tl.float32)
    a = tl.load(a_ptr + token * sa + head, mask=mask, other=0.0).to(tl.float32)
    A_log = tl.load(A_log_ptr + head, mask=mask, other=0.0).to(tl.float32)
    dt_bias = tl.load(dt_bias_ptr + head, mask=mask, other=0.0).to(tl.float32)
    tl.store(beta_ptr + i, sigmoid(b).to(beta_ptr.dtype.element_ty), mask=mask)
    tl.store(g_ptr + i, -tl.exp(A_log) * softplus(a + dt_bias), mask=mask)
    # END SOLUTION


@triton.jit
def l2norm_block(src_ptr, stride_t, stride_h, dst_ptr, r, d, rows, H, D, scale, eps):
    """Rows r [BLOCK_R] (row = token * H + head) of a [T, H, D] view: L2-normalise, scale, store contiguous."""
    # BEGIN SOLUTION: token r // H and head r % H give the source offsets;
    #   load [BLOCK_R, BLOCK_D] as fp32 (mask rows >= rows, d >= D);
    #   divide each row by sqrt(sum of squares + eps) (l2_normalize_rows), times scale; store at r * D + d
    mask = (r < rows)[:, None] & (d < D)[None, :]
    t = (r // H).to(tl.int64)
    h = r % H
    x = tl.load(src_ptr + (t * stride_t + h * stride_h)[:, None] + d[None, :], mask=mask, other=0.0)
    y = l2_normalize_rows(x.to(tl.float32), eps) * scale
    tl.store(dst_ptr + r.to(tl.int64)[:, None] * D + d[None, :], y.to(dst_ptr.dtype.element_ty), mask=mask)
    # END SOLUTION


@triton.jit
def l2norm_qk_kernel(q_ptr, k_ptr, q_out_ptr, k_out_ptr, rows, H, D, sq_t, sq_h, sk_t, sk_h, q_scale, eps,
                     BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)                      # [BLOCK_R] rows
    d = tl.arange(0, BLOCK_D)
    if tl.program_id(1) == 0:
        l2norm_block(q_ptr, sq_t, sq_h, q_out_ptr, r, d, rows, H, D, q_scale, eps)
    else:
        l2norm_block(k_ptr, sk_t, sk_h, k_out_ptr, r, d, rows, H, D, 1.0, eps)


# --- host side ------------------------------------------------------------------------------------
def deltanet_gates(b: torch.Tensor, a: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor,
                   beta: torch.Tensor | None = None, g: torch.Tensor | None = None):
    """beta = sigmoid(b) and g = -exp(A_log) * softplus(a + dt_bias) for every (token, value head).

    b, a:    [T, HV] float, one dtype (in_proj_b and in_proj_a outputs); each head's values contiguous,
             any token stride (column slices of the merged in-projection's output are fine)
    A_log:   [HV] float (fp32 in the checkpoint); dt_bias: [HV] float; both read as fp32
    beta:    [T, HV] in b's dtype;  g: [T, HV] fp32 (a chunk sums up to 64 of them: keep them exact)
    returns (beta, g).
    """
    validate.tensor(b, "b", dtype=validate.FLOATS, ndim=2, contiguous=False)
    validate.tensor(a, "a", dtype=b.dtype, shape=tuple(b.shape), contiguous=False)
    T, HV = b.shape
    validate.token_rows(b, "b")
    validate.token_rows(a, "a")
    validate.tensor(A_log, "A_log", dtype=validate.FLOATS, shape=(HV,))
    validate.tensor(dt_bias, "dt_bias", dtype=validate.FLOATS, shape=(HV,))
    device = validate.same_device(b=b, a=a, A_log=A_log, dt_bias=dt_bias)
    beta = validate.output(beta, "beta", (T, HV), b.dtype, device)
    g = validate.output(g, "g", (T, HV), torch.float32, device)
    validate.disjoint({"beta": beta, "g": g}, {"b": b, "a": a, "A_log": A_log, "dt_bias": dt_bias})
    n = T * HV
    if n == 0:
        return beta, g
    block = min(1024, triton.next_power_of_2(n))
    deltanet_gates_kernel[(triton.cdiv(n, block),)](b, a, A_log, dt_bias, beta, g, n, HV, b.stride(0),
                                                     a.stride(0), BLOCK=block, num_warps=4, **pdl_args())
    return beta, g


def _heads_view(x: torch.Tensor, name: str, shape=None) -> torch.Tensor:
    """A [T, H, D] tensor whose last dim is contiguous (token and head strides are free)."""
    validate.tensor(x, name, dtype=validate.FLOATS, ndim=3, shape=shape, contiguous=False)
    if x.stride(2) != 1 and x.shape[2] > 1:
        raise ValueError(f"{name} must have a contiguous last dim (stride 1), got strides {x.stride()}")
    return x


def l2norm_qk(q: torch.Tensor, k: torch.Tensor, eps: float = 1e-6,
              q_out: torch.Tensor | None = None, k_out: torch.Tensor | None = None):
    """DeltaNet q and k: unit length per head, q also scaled by head_dim^-0.5; both in one launch.

    q, k:  [T, H, D] float (views of the conv output are fine: only the last dim must be contiguous)
    q_out, k_out: [T, H, D] contiguous, in q's and k's dtypes. Norms and products in fp32.
    returns (q_out, k_out).
    """
    _heads_view(q, "q")
    _heads_view(k, "k", shape=tuple(q.shape))
    validate.positive(eps, "eps")
    device = validate.same_device(q=q, k=k)
    T, H, D = q.shape
    q_out = validate.output(q_out, "q_out", (T, H, D), q.dtype, device)
    k_out = validate.output(k_out, "k_out", (T, H, D), k.dtype, device)
    validate.disjoint({"q_out": q_out, "k_out": k_out}, {"q": q, "k": k}, same={"q_out": "q", "k_out": "k"})
    rows = T * H
    if rows == 0 or D == 0:       # heads of no element: nothing to normalise (D ** -0.5 divided by zero)
        return q_out, k_out
    block_d = triton.next_power_of_2(D)
    block_r = min(triton.next_power_of_2(rows), max(1, 2048 // block_d))   # 16 rows of 128 per program
    num_warps = min(8, max(1, block_r * block_d // 256))                    # 8 elements per thread
    l2norm_qk_kernel[(triton.cdiv(rows, block_r), 2)](
        q, k, q_out, k_out, rows, H, D, q.stride(0), q.stride(1), k.stride(0), k.stride(1), D ** -0.5, eps,
        BLOCK_R=block_r, BLOCK_D=block_d, num_warps=num_warps)
    return q_out, k_out
