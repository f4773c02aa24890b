"""SwiGLU (operator 11): `silu(gate) * up`, the activation between the MLP's two projections (chapter 10_mlp).

    gate, up = x @ W_gate.T, x @ W_up.T      [T, 3584] each (operator 10)
    h        = silu(gate) * up               [T, 3584]      (this kernel)
    y        = h @ W_down.T                  [T, 1024]      (operator 12)

The engine computes gate and up with ONE GEMV over the stacked weight [W_gate; W_up] ([7168, 1024]), so
they arrive side by side in one tensor [T, 2 * 3584] = [gate | up]. `swiglu_merged` reads that layout
directly; `swiglu` takes two separate tensors (the reference's signature). Both launch the same kernel,
which is given a row stride for each operand.

silu(g) = g * sigmoid(g) is computed in fp32 and rounded once: in bf16, sigmoid's 1 / (1 + e^-g) keeps
only 8 bits, and a formula like e^g / (1 + e^g) overflows to inf / inf = NaN for g > 88 (fp32) or g > 11
(fp16).
"""
import torch
import triton
import triton.language as tl

from tritonllm_course import validate
from tritonllm_course.runtime import pdl_args
from tritonllm_course.triton_helpers import pdl_enter, silu


@triton.jit
def swiglu_kernel(gate_ptr, up_ptr, out_ptr, inter, stride_gate, stride_up, stride_out,
                  BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    # BEGIN SOLUTION: program (row, block of columns); load gate and up of that row as fp32, store silu(gate) * up
    row = tl.program_id(0).to(tl.int64)       # int64: row * stride can pass 2**31 in long prefills
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    g = tl.load(gate_ptr + row * stride_gate + cols, mask=mask).to(tl.float32)
    u = tl.load(up_ptr + row * stride_up + cols, mask=mask).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (silu(g) * u).to(out_ptr.dtype.element_ty), mask=mask)
    # END SOLUTION


def _launch(gate, up, out, block_size):
    block_size = validate.block_size(block_size)
    rows, inter = out.shape
    grid = (rows, triton.cdiv(inter, block_size))
    swiglu_kernel[grid](gate, up, out, inter, gate.stride(0), up.stride(0), out.stride(0),
                        BLOCK=block_size, num_warps=4, **pdl_args())
    return out


def swiglu(gate: torch.Tensor, up: torch.Tensor, out: torch.Tensor | None = None,
           block_size: int = 1024) -> torch.Tensor:
    """`silu(gate) * up`, elementwise.

    gate, up: [T, I] float, same shape and dtype, contiguous
    out:      [T, I], gate's dtype
    block_size: columns per program (1024: 8 bf16 values, 16 bytes, per thread of 4 warps)
    """
    validate.tensor(gate, "gate", dtype=validate.FLOATS, ndim=2)
    validate.tensor(up, "up", dtype=gate.dtype, shape=tuple(gate.shape))
    device = validate.same_device(gate=gate, up=up)
    out = validate.output(out, "out", tuple(gate.shape), gate.dtype, device)
    validate.disjoint({"out": out}, {"gate": gate, "up": up}, same=("gate", "up"))
    return _launch(gate, up, out, block_size)


def swiglu_merged(gate_up: torch.Tensor, out: torch.Tensor | None = None,
                  block_size: int = 1024) -> torch.Tensor:
    """`silu(gate) * up` for the merged projection output [T, 2 * I] = [gate | up].

    gate_up: [T, 2 * I] float, contiguous (row t holds gate[t, :] then up[t, :])
    out:     [T, I], gate_up's dtype
    """
    validate.tensor(gate_up, "gate_up", dtype=validate.FLOATS, ndim=2)
    rows, width = gate_up.shape
    if width % 2:
        raise ValueError(f"gate_up has shape {list(gate_up.shape)}; its last dim must be 2 * I (even)")
    device = validate.same_device(gate_up=gate_up)
    out = validate.output(out, "out", (rows, width // 2), gate_up.dtype, device)
    validate.disjoint({"out": out}, {"gate_up": gate_up})
    gate, up = gate_up[:, : width // 2], gate_up[:, width // 2:]     # [T, I] views, row stride 2 * I
    return _launch(gate, up, out, block_size)
