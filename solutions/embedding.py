"""Embedding lookup (operator 1, chapter 03_embedding): out[t, :] = weight[ids[t], :], a row gather.

The table is [vocab, hidden] = [248320, 1024], 508.6 MB in bf16 and also the tied LM head, but one call
reads only the T rows its tokens name: 2 KB per token. There is no arithmetic at all, so the kernel is
judged by bytes per second, and at T = 1 (decode) by its latency alone.

Grid (T, cdiv(hidden, BLOCK_H)): one program copies one block of one row. With hidden = 1024 and
BLOCK_H = 1024 that is one program per token, 4 warps, 8 consecutive elements (16 bytes of bf16) per
thread: a single vectorised load and store each.

Ids outside [0, vocab). The wrapper checks them on the host by default (`check_ids=True`): a clear
ValueError, at the price of a device-to-host sync on a GPU. An engine that feeds the ids of its own
argmax and replays the step in a CUDA graph passes `check_ids=False`; the check is skipped during graph
capture anyway (a sync is not allowed there). The kernel itself never reads outside the table: a row
whose id is out of range is written as NaN, so the mistake shows downstream instead of reading foreign
memory or crashing the GPU context.
"""
import torch
import triton
import triton.language as tl

from tritonllm_course import validate
from tritonllm_course.runtime import pdl_args
from tritonllm_course.triton_helpers import pdl_enter

MAX_BLOCK_H = 1024   # columns per program: 16 bytes per thread at 4 warps in bf16


@triton.jit
def embedding_kernel(ids_ptr, weight_ptr, out_ptr, vocab, hidden, BLOCK_H: tl.constexpr, PDL: tl.constexpr = False):
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    # BEGIN SOLUTION: read the id of token program_id(0) (as int64: id * hidden can pass 2^31),
    #   copy block program_id(1) of its row; a row whose id is outside [0, vocab) is written as NaN and never read
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    in_row = cols < hidden
    row = tl.load(ids_ptr + t).to(tl.int64)
    valid = (row >= 0) & (row < vocab)
    # tl.where, not `in_row & valid`: triton 3.9's interpreter types a block `&` a scalar as an integer, no mask
    values = tl.load(weight_ptr + row * hidden + cols, mask=tl.where(valid, in_row, False), other=float("nan"))
    values = values.to(tl.float32)          # exact for bf16/fp16; the interpreter's bf16 is unreliable
    tl.store(out_ptr + t * hidden + cols, values.to(out_ptr.dtype.element_ty), mask=in_row)
    # END SOLUTION


def embedding(ids: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None,
              check_ids: bool = True) -> torch.Tensor:
    """Rows of the embedding table: out[t] = weight[ids[t]].

    ids:       [T] int32 or int64 token ids, in [0, vocab)
    weight:    [vocab, hidden] float, contiguous
    out:       [T, hidden] in weight's dtype (allocated when None)
    check_ids: check the id range on the host first (a device sync on a GPU; skipped during CUDA-graph
               capture). Without it an out-of-range id gives a NaN row, never a read outside the table.
    """
    validate.tensor(ids, "ids", dtype=validate.INTS, ndim=1)
    validate.tensor(weight, "weight", dtype=validate.FLOATS, ndim=2)
    device = validate.same_device(ids=ids, weight=weight)
    vocab, hidden = weight.shape
    out = validate.output(out, "out", (ids.shape[0], hidden), weight.dtype, device)
    validate.disjoint({"out": out}, {"ids": ids, "weight": weight})
    if validate.flag(check_ids, "check_ids"):   # "no" was true by its truth
        validate.device_range(ids, 0, vocab - 1, "token id", "outside the vocabulary")
    if out.numel() == 0:          # no token, or rows of no column (hidden 0 divided by zero in the grid)
        return out
    block = min(triton.next_power_of_2(hidden), MAX_BLOCK_H)
    grid = (ids.shape[0], triton.cdiv(hidden, block))
    embedding_kernel[grid](ids, weight, out, vocab, hidden, BLOCK_H=block, num_warps=4, **pdl_args())
    return out
