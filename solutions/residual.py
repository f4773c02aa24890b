"""Residual adds (operators 9 and 13): `h = residual + x` on the [T, hidden] residual stream (chapter
09_output_residual).

Every layer adds twice: the mixer's output (attention or DeltaNet, after o_proj / out_proj) and then the
MLP's output onto the residual stream. One kernel serves both slots.

An elementwise add does one FLOP per 6 bytes (bf16): it is memory-bound, and at decode (T = 1, 2 KB per
tensor) it is launch-bound, which is why the engine's faster levels fold it into a neighbour: the fused
level the last layer's add into the final norm, the fast level every add into the epilogue of the projection
before it (chapter 22_layer_fusion). The add runs in fp32 and rounds once, which is exactly what PyTorch's
bf16 `residual + x` does.

The residual stream may be kept in fp32 while x is in the model dtype (the fp16 mode: a trained model's
residual stream can outgrow fp16's 65,504); the output then has the residual's dtype. `out` may
be `residual` itself: each element is read before it is written, by the same program, so the update can
happen in place.
"""
import torch
import triton
import triton.language as tl

from tritonllm_course import validate
from tritonllm_course.runtime import pdl_args
from tritonllm_course.triton_helpers import pdl_enter


@triton.jit
def residual_add_kernel(x_ptr, res_ptr, out_ptr, n, BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    # BEGIN SOLUTION: this program's block of the flat tensor; load x and the residual, add in fp32,
    #   store in out's dtype
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    r = tl.load(res_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, (r + x).to(out_ptr.dtype.element_ty), mask=mask)
    # END SOLUTION


def residual_add(x: torch.Tensor, residual: torch.Tensor, out: torch.Tensor | None = None,
                 block_size: int = 1024) -> torch.Tensor:
    """`residual + x`.

    x:        [T, hidden] (any shape) float: the sublayer's output, in the model dtype
    residual: same shape, x's dtype or float32 (an fp32 residual stream)
    out:      same shape, residual's dtype; may be `residual` itself (in-place update)
    block_size: elements per program; 1024 gives each of 128 threads 8 bf16 values (16-byte loads)
    """
    block_size = validate.block_size(block_size)
    validate.tensor(x, "x", dtype=validate.FLOATS)
    stream_dtypes = (x.dtype,) if x.dtype == torch.float32 else (x.dtype, torch.float32)
    validate.tensor(residual, "residual", dtype=stream_dtypes, shape=tuple(x.shape))
    device = validate.same_device(x=x, residual=residual)
    out = validate.output(out, "out", tuple(x.shape), residual.dtype, device)
    validate.disjoint({"out": out}, {"x": x, "residual": residual}, same=("x", "residual"))
    n = x.numel()
    if n >= 2**31:
        raise ValueError(f"x has {n} elements; this kernel indexes with int32 (at most 2**31 - 1)")
    residual_add_kernel[(triton.cdiv(n, block_size),)](x, residual, out, n, BLOCK=block_size, num_warps=4,
                                                       **pdl_args())
    return out
