"""The decode step's counters in device memory (chapter 18_cuda_graphs): advanced by a kernel, inside the CUDA graph.

A CUDA graph replays the kernel launches it recorded with the arguments they had at capture: a Python
int position passed to a kernel would be frozen there, and every replayed token would land at the same
position. The engine therefore keeps what changes from token to token in one small int32 tensor,

    steps = [position of the token being decoded, cache length after it, sampling seed]

that the kernels read from device memory (RoPE and the KV-cache write read the position, the decode
attention reads the length, the sampler the seed), and the last launch of the step adds 1 to every
counter. The graph then advances itself: replay after replay, no host-to-device copy and no sync. The
host keeps its own count beside it, to refuse a sequence that would overflow the cache before any work.
"""
import torch
import triton
import triton.language as tl

from tritonllm_course import validate
from tritonllm_course.runtime import pdl_args
from tritonllm_course.triton_helpers import pdl_enter

MAX_COUNTERS = 1024   # one program holds them all


@triton.jit
def advance_kernel(steps_ptr, n, BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    """steps[i] += 1 for i < n, in place (one program)."""
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    # BEGIN EXERCISE: offsets 0..BLOCK-1 masked to n; load the counters, add 1, store them back in place
    raise NotImplementedError("exercise engine.py, advance_kernel: not implemented yet")
    # END EXERCISE


def advance_positions(steps: torch.Tensor) -> torch.Tensor:
    """Add 1 to every counter of `steps`, in place, on the device (no host read, so it can be captured).

    steps: [n] int32 or int64, contiguous, n <= 1024 (the engine's [position, length, seed])
    returns steps.
    """
    validate.tensor(steps, "steps", dtype=validate.INTS, ndim=1)
    n = steps.numel()
    if not 0 < n <= MAX_COUNTERS:
        raise ValueError(f"steps has {n} counters; expected 1 to {MAX_COUNTERS}")
    validate.same_device(steps=steps)
    advance_kernel[(1,)](steps, n, BLOCK=max(16, triton.next_power_of_2(n)), num_warps=1, **pdl_args())
    return steps
