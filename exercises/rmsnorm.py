"""Zero-centred RMSNorm (operators 14 and 15, chapter 04_rmsnorm): y = x / rms(x) * (1 + w), fp32 statistics.

One kernel serves every zero-centred norm of Qwen3.5: ln1 and ln2 (input_layernorm and
post_attention_layernorm, over hidden = 1024), the final norm, and q_norm / k_norm (per head, over
head_dim = 256, one weight shared by all heads). For all of them the input is a stack of independent
rows, seen as [T, heads, D]: [T, 1, 1024] for the layer norms, [T, 8, 256] for q. The rows need not be
packed: q is a strided view into the q_proj output, where each head's 256 query dims are followed by
its 256 gate dims, and the kernel reads it there, with strides, instead of copying it out first. The
output is written packed.

One program normalises BLOCK_M whole rows held in registers: it reads each row once, sums the squares
in fp32, scales and writes it once: 2 x rows x D x element size bytes plus the weight, the minimum.
BLOCK_M is chosen so that a program holds about 1024 elements: 1 row of 1024 (ln; 4 warps, 8 elements =
16 bytes of bf16 per thread), 4 rows of 256 (q/k norm). Decode (T = 1) is one program for ln, two for
q_norm: bound by launch latency whatever the kernel does. Prefill (T = 128) is 128 programs for ln, one
wave on the H200's 132 SMs.

Why fp32 statistics: the squares of 1024 elements summed in fp16 (max 65504) overflow as soon as the
row's rms passes 8, and Qwen's residual stream has channels in the hundreds. The weight is an offset
from 1 (initialised to 0): multiplying by `w` instead of `1 + w` scales the output by about 0.
"""
import torch
import triton
import triton.language as tl

from tritonllm_course import validate
from tritonllm_course.runtime import pdl_args
from tritonllm_course.triton_helpers import pdl_enter

ELEMENTS_PER_PROGRAM = 1024
MAX_DIM = 32768      # a whole row lives in registers: 16 warps x 32 threads x 64 fp32 values


@triton.jit
def rms_norm_kernel(x_ptr, w_ptr, out_ptr, rows, heads, dim, stride_t, stride_h, eps,
                    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, PDL: tl.constexpr = False):
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    # BEGIN EXERCISE: rows r = program_id * BLOCK_M + [0, BLOCK_M)
    #   sit at x + (r // heads) * stride_t + (r % heads) * stride_h, packed in out;
    #   load a [BLOCK_M, BLOCK_D] tile as fp32 (mask rows >= rows, columns >= dim);
    #   y = x * rsqrt(mean(x^2) + eps) * (1 + w); store in out's dtype
    raise NotImplementedError("exercise rmsnorm.py, rms_norm_kernel: not implemented yet")
    # END EXERCISE


def _launch(x: torch.Tensor, rows3: torch.Tensor, weight: torch.Tensor, eps: float,
            out: torch.Tensor | None) -> torch.Tensor:
    """Normalise the rows of x, given as the [T, heads, D] view rows3 (unit stride along D)."""
    tokens, heads, dim = rows3.shape
    validate.tensor(weight, "weight", dtype=validate.FLOATS, shape=(dim,))
    device = validate.same_device(x=x, weight=weight)
    out = validate.output(out, "out", tuple(x.shape), x.dtype, device)
    validate.disjoint({"out": out}, {"x": x, "weight": weight}, same=("x",))
    if not 0 < dim <= MAX_DIM:
        raise ValueError(f"x's last dim, the normalised dim, is {dim}; this kernel keeps a row in registers "
                         f"and supports 1 to {MAX_DIM}")
    validate.positive(eps, "eps")
    rows = tokens * heads
    if rows == 0:
        return out
    block_d = triton.next_power_of_2(dim)
    block_m = min(max(1, ELEMENTS_PER_PROGRAM // block_d), triton.next_power_of_2(rows))
    num_warps = min(16, max(1, block_m * block_d // 256))   # 8 elements (16 bytes of bf16) per thread
    rms_norm_kernel[(triton.cdiv(rows, block_m),)](
        rows3, weight, out, rows, heads, dim, rows3.stride(0), rows3.stride(1), eps,
        BLOCK_M=block_m, BLOCK_D=block_d, num_warps=num_warps, **pdl_args())
    return out


def _unit_last_stride(x: torch.Tensor) -> None:
    validate.tensor(x, "x", dtype=validate.FLOATS, contiguous=False)
    if x.dim() == 0 or (x.shape[-1] > 1 and x.stride(-1) != 1):
        raise ValueError(f"x (shape {list(x.shape)}, strides {x.stride()}) must have a last dim of stride 1; "
                         "call .contiguous() first")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
             out: torch.Tensor | None = None) -> torch.Tensor:
    """Zero-centred RMSNorm over the last dim: out = x / sqrt(mean(x^2) + eps) * (1 + weight).

    x:      [..., D] float, last dim of stride 1 ([T, 1024] in the model: ln1, ln2 and the final norm);
            the leading dims must merge into [rows, D] or [T, heads, D] without a copy
    weight: [D] float, the offset from 1 (any float dtype; read as fp32)
    out:    x's shape and dtype, packed (allocated when None). Statistics and products in fp32, one
            rounding at the end.
    """
    _unit_last_stride(x)
    # the leading sizes given, not -1, which an empty last dim leaves undetermined
    if x.dim() <= 2:
        rows3 = x.reshape(x.shape[:-1].numel(), 1, x.shape[-1])     # [rows, 1, D]
    else:
        try:
            rows3 = x.view(x.shape[:-2].numel(), *x.shape[-2:])     # [T, heads, D]
        except RuntimeError:
            raise ValueError(f"x of shape {list(x.shape)} and strides {x.stride()}: its leading dims "
                             "cannot be merged without a copy; call .contiguous() first") from None
    return _launch(x, rows3, weight, eps, out)


def qk_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
            out: torch.Tensor | None = None) -> torch.Tensor:
    """Per-head zero-centred RMSNorm of queries or keys, before RoPE.

    x:      [T, heads, head_dim] float, last dim of stride 1 (q: [T, 8, 256], a strided view into the
            q_proj output; k: [T, 2, 256])
    weight: [head_dim], shared by every head (q_norm.weight or k_norm.weight)
    out:    [T, heads, head_dim] in x's dtype, packed (allocated when None)
    """
    _unit_last_stride(x)
    if x.dim() != 3:
        raise ValueError(f"x must be [T, heads, head_dim], got shape {list(x.shape)}")
    return _launch(x, x, weight, eps, out)
