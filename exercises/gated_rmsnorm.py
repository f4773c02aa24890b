"""The gated RMSNorm at the end of every Gated DeltaNet layer (chapter 17_deltanet_layer):

    y = x / sqrt(mean(x^2) + eps) * w * silu(z)         per value head of D = 128, eps = 1e-6

x is the delta rule's output o [T, HV, D], z the output gate (in_proj_z) of the same shape, w a plain
scale [D] (initialised to 1, fp32 in the checkpoint; NOT the zero-centred 1 + w of the other norms).
The rows are independent: [T, HV, D] is read as [T * HV, D]. One program normalises BLOCK_R whole rows
held in registers: it reads x and z once and writes y once (3 x rows x D x element size bytes, plus w).
Everything is computed in fp32 and rounded once (transformers rounds the normalised x to the model
dtype before multiplying by w: at most one bf16 rounding apart).

Rows = 16 at decode (launch-bound: two programs), 2,048 at a 128-token prefill (1.6 MB in bf16).
"""
import torch
import triton
import triton.language as tl

from tritonllm_course import validate
from tritonllm_course.runtime import pdl_args
from tritonllm_course.triton_helpers import pdl_enter, silu


@triton.jit
def gated_rms_norm_kernel(x_ptr, z_ptr, w_ptr, out_ptr, rows, D, eps, HEADS, sz,
                          BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr, PDL: tl.constexpr = False):
    """x, out: [rows, D] contiguous; z: row r at (r // HEADS) * sz + (r % HEADS) * D (a token's HEADS rows
    contiguous, tokens sz apart: a column slice of the merged in-projection's output)."""
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    # BEGIN EXERCISE: a [BLOCK_R, BLOCK_D] tile of rows (mask rows >= rows and d >= D);
    #   x, z (at its token stride), w as fp32; y = x * rsqrt(mean(x^2) + eps) * w * silu(z); store in out's dtype
    raise NotImplementedError("exercise gated_rmsnorm.py, gated_rms_norm_kernel: not implemented yet")
    # END EXERCISE


def gated_rms_norm(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                   out: torch.Tensor | None = None) -> torch.Tensor:
    """DeltaNet output norm: out = x / rms(x) * weight * silu(z) over the last dim.

    x:      [..., D] float, contiguous (the delta rule's output, [T, HV, 128] in the model)
    z:      x's shape and dtype (the output gate from in_proj_z); contiguous within a token (z[0]),
            any token stride: a column slice of the merged in-projection's output, viewed [T, HV, 128]
    weight: [D] float, a plain scale (any float dtype: fp32 in the checkpoint), read as fp32
    out:    x's shape and dtype. Statistics and products in fp32, one rounding at the end.
    """
    validate.tensor(x, "x", dtype=validate.FLOATS)
    if x.dim() == 0:
        raise ValueError("x must have at least one dim (the one normalised)")
    validate.tensor(z, "z", dtype=x.dtype, shape=tuple(x.shape), contiguous=z.dim() < 2)
    validate.token_rows(z, "z")             # tokens at any stride (z[0], a token's rows, contiguous)
    D = x.shape[-1]
    validate.tensor(weight, "weight", dtype=validate.FLOATS, shape=(D,))
    validate.positive(eps, "eps")
    device = validate.same_device(x=x, z=z, weight=weight)
    out = validate.output(out, "out", tuple(x.shape), x.dtype, device)
    validate.disjoint({"out": out}, {"x": x, "z": z, "weight": weight}, same=("x",))
    rows = x.numel() // D if D else 0
    if rows == 0:
        return out
    block_d = triton.next_power_of_2(D)
    block_r = min(triton.next_power_of_2(rows), max(1, 1024 // block_d))    # 8 rows of 128 per program
    num_warps = min(8, max(1, block_r * block_d // 256))                    # 8 elements per thread
    # a token's rows (z[0]) and the token stride; a contiguous z is one "token" of all its rows
    heads, sz = (rows, 0) if z.is_contiguous() else (z[0].numel() // D, z.stride(0))
    gated_rms_norm_kernel[(triton.cdiv(rows, block_r),)](x, z, weight, out, rows, D, eps, heads, sz,
                                                         BLOCK_R=block_r, BLOCK_D=block_d, num_warps=num_warps,
                                                         **pdl_args())
    return out
