"""Slot spec of chapter 18_cuda_graphs's kernel: the decode step's counters, advanced in device memory."""
import torch

from ..reference.engine import advance_positions
from . import implement, tensor_bytes


def _inputs(shape, dtype, device, gen):
    # dtype is the chapter's float dtype: the counters are integers whatever it is. They span the range a
    # sampling seed takes (up to 2^31 - 2 in int32, so that + 1 stays in range): an add through fp32,
    # exact only below 2^24, goes wrong
    int_dtype = getattr(torch, shape.get("int_dtype", "int32"))
    high = 2**31 - 1 if int_dtype == torch.int32 else 2**40
    counters = torch.randint(0, high, (shape["n"],), generator=gen, device=device)
    return {"steps": counters.to(int_dtype)}


implement(
    "advance_positions", title="advance the decode counters", op=None, chapter="18_cuda_graphs",
    qwen="[position, cache length, sampling seed] + 1 in device memory, the last launch of the graphed step",
    family="engine", function="advance_positions", reference=advance_positions,
    torch_impl=lambda steps: steps.add_(1),
    make_inputs=_inputs, make_out=lambda inp: {}, mutated=("steps",), exact=True,
    shapes={"tiny": [{"n": 3}, {"n": 17, "int_dtype": "int64"}], "real": [{"n": 3}]},
    bytes=lambda inp: 2 * tensor_bytes(inp["steps"]),
    dims={"steps": ("counter",)},
)
