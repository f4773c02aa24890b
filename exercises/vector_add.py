"""Vector add: the first Triton kernel of the course (chapter 01_triton_basics).

One program handles one block of BLOCK_SIZE consecutive elements. The mask keeps the last block from
reading or writing past the end when n is not a multiple of BLOCK_SIZE.
"""
import torch
import triton
import triton.language as tl

from tritonllm_course import validate


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    # BEGIN EXERCISE: offsets of this program's block, a mask for the tail, load x and y, store x + y
    raise NotImplementedError("exercise vector_add.py, add_kernel: not implemented yet")
    # END EXERCISE


def add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor | None = None,
        block_size: int = 1024) -> torch.Tensor:
    """out = x + y for two contiguous tensors of the same shape and dtype; block_size a power of two."""
    block_size = validate.block_size(block_size)
    validate.tensor(x, "x", dtype=validate.FLOATS)
    validate.tensor(y, "y", dtype=x.dtype, shape=tuple(x.shape))
    device = validate.same_device(x=x, y=y)
    out = validate.output(out, "out", tuple(x.shape), x.dtype, device)
    validate.disjoint({"out": out}, {"x": x, "y": y}, same=("x", "y"))
    n = x.numel()
    grid = (triton.cdiv(n, block_size),)
    add_kernel[grid](x, y, out, n, BLOCK_SIZE=block_size)
    return out
