"""Slot specs of operator 17: the greedy argmax (exact), and the device sampler checked exactly against a
reference given the same Gumbel noise."""
import torch

from . import Edge, implement, tensor_bytes
from .. import kernels
from ..reference.sampling import argmax, sample_with_noise, top_k_top_p_filter


def _logits_with_ties(shape, dtype, device, gen):
    """Logits ~ N(0, 2) with a new maximum (row max + 1) planted at p, at p + 2048 and at 2 random later
    places: the lowest index, p, must win. p and p + 2048 share a lane of any power-of-two tile up to 2048,
    so a lane that lets a later equal value replace its best fails when a program reads several tiles."""
    rows, vocab = shape["rows"], shape["vocab"]
    logits = (2 * torch.randn(rows, vocab, generator=gen, device=device)).to(dtype)
    top = logits.max(dim=-1, keepdim=True).values + 1                               # [rows, 1]
    first = torch.randint(0, min(vocab, 2048), (rows, 1), generator=gen, device=device)            # [rows, 1]
    later = torch.maximum(torch.randint(0, vocab, (rows, 2), generator=gen, device=device), first)  # [rows, 2]
    where = torch.cat([first, (first + 2048).clamp(max=vocab - 1), later], dim=-1)               # [rows, 4]
    inputs = {"logits": logits.scatter(-1, where, top.expand(rows, 4))}
    if "num_blocks" in shape:
        inputs["num_blocks"] = shape["num_blocks"]
    return inputs


_TILES = {"rows": 3, "vocab": 12000, "num_blocks": 3}   # 3 blocks of two 2048-wide tiles


def _all_negative(inputs, shape, dtype, gen):
    """Every logit below 0 (ties kept: the row's maximum stays 1 above the rest): the merge must pad its
    masked blocks with the lowest key, not with key 0 (the logit +0.0), which would then win."""
    inputs["logits"] = inputs["logits"] - 20
    return inputs


def _sampling_inputs(shape, dtype, device, gen):
    logits = (3 * torch.randn(shape["rows"], shape["vocab"], generator=gen, device=device)).to(dtype)
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen, device=device))
    inputs = {"logits": logits, "temperature": shape["temperature"], "top_k": shape["top_k"],
              "top_p": shape["top_p"], "seed": seed}
    if "num_blocks" in shape:
        inputs["num_blocks"] = shape["num_blocks"]
    if shape.get("sure_winners"):
        inputs = _sure_winners(inputs, shape, dtype, gen)
    return inputs


def _torch_sample(logits, temperature, top_k, top_p, seed, num_blocks=None):
    """PyTorch's sampler without a host sync, the way gpt-fast samples: the filter by `torch.topk` and a sort,
    the draw as the argmax of probs / Exp(1) noise (Gumbel-max in another form). The reference's draw
    (`reference.sampling.sample`) checks the logits with a `bool()` of a GPU tensor before `torch.multinomial`:
    the host waits, so it cannot be captured in a CUDA graph, and a benchmark or an engine graph could not
    time it. The draws come from PyTorch's generator, not `seed`: a timing baseline, whose tokens nothing
    compares."""
    probs = torch.softmax(top_k_top_p_filter(logits.float() / temperature, top_k, top_p), dim=-1)
    return torch.argmax(probs / torch.empty_like(probs).exponential_(1), dim=-1)


_WINNERS = {"rows": 2, "vocab": 4200, "num_blocks": 2, "top_k": 0, "top_p": 1.0}   # see _sure_winners


def _sure_winners(inputs, shape, dtype, gen):
    """A logit 40 above the rest in each row (no noise draw can beat it), where a merge or lane bug loses
    it: row 0's in the second tile of block 0 (a lane that keeps its first key), row 1's in block 1 (a
    merge that keeps block 0, or reads row 0's blocks). vocab 4200 in 2 blocks: tiles [0, 2048),
    [2048, 4096) in block 0, [4096, 4200) in block 1."""
    logits = inputs["logits"]
    top = logits.max(dim=-1).values + 40                                          # [rows]
    spans = [(2048, 4096), (4096, shape["vocab"])]
    for r in range(logits.shape[0]):
        lo, hi = spans[r % 2]
        at = int(torch.randint(lo, hi, (1,), generator=gen, device=logits.device))
        logits[r, at] = top[r]
    return inputs


def _sampling_reference(logits, temperature, top_k, top_p, seed, num_blocks=None):
    """The same draw from PyTorch: the kernel's noise (from the seed), the filter as a threshold."""
    gumbel_noise = kernels.get("sampling", "gumbel_noise")
    noise = gumbel_noise(seed, logits.shape[0], logits.shape[-1], logits.device)
    return sample_with_noise(logits, noise, temperature, top_k, top_p)


def _argmax_reference(logits, num_blocks=None):
    """`argmax`; num_blocks (how the kernel splits the row) changes nothing in the result."""
    return argmax(logits)


def _out(inp):
    return {"out": torch.empty(inp["logits"].shape[:-1], dtype=torch.int64, device=inp["logits"].device)}


implement(
    "argmax", family="sampling", function="argmax",
    reference=_argmax_reference,
    # the reference's NaN check syncs the host
    torch_impl=lambda logits, num_blocks=None: torch.argmax(logits, dim=-1),
    make_inputs=_logits_with_ties,
    make_out=_out,
    exact=True,
    # tiny 1: three blocks of two 2048-wide tiles each (lanes see several elements; the merge masks a
    # block count that is not a power of two) over several rows
    shapes={"tiny": [_TILES, {"rows": 1, "vocab": 1000}],
            "real": [{"rows": 1, "vocab": 248320}, {"rows": 128, "vocab": 248320}]},
    bytes=lambda inp: tensor_bytes(inp["logits"]) + 8 * inp["logits"].shape[0],
    # on a GPU too: the real rows have one tile per block, so no lane sees two elements there
    edges=[Edge("all logits negative", _all_negative, shape=_TILES)],
    dims={"out": ("row",)},
)

implement(
    "sample", title="temperature / top-k / top-p sampling", op=17,
    qwen="Gumbel-max on the device, top-k / top-p as a threshold found without sorting",
    chapter="12_sampling", family="sampling", function="sample",
    reference=_sampling_reference,
    # PyTorch's way: sort, softmax, cumsum, then a draw that needs no host sync
    torch_impl=_torch_sample,
    make_inputs=_sampling_inputs,
    make_out=_out,
    exact=True,
    # tiny 1: temperature alone (no threshold search: the slow part under the interpreter), winners
    # where a merge or lane bug loses them (an edge on a GPU); tiny 3: one block of two 2048-wide tiles
    shapes={"tiny": [{**_WINNERS, "temperature": 0.8, "sure_winners": True},
                     {"rows": 2, "vocab": 777, "temperature": 0.8, "top_k": 40, "top_p": 0.9},
                     {"rows": 1, "vocab": 3001, "temperature": 1.3, "top_k": 0, "top_p": 0.8, "num_blocks": 1}],
            "real": [{"rows": 1, "vocab": 248320, "temperature": 0.7, "top_k": 50, "top_p": 0.9},
                     {"rows": 1, "vocab": 248320, "temperature": 1.0, "top_k": 0, "top_p": 0.95},
                     {"rows": 1, "vocab": 248320, "temperature": 1.0, "top_k": 0, "top_p": 1.0}]},
    bytes=lambda inp: tensor_bytes(inp["logits"]) + 8 * inp["logits"].shape[0],   # the logits, read once
    edges=[Edge("sure winners late in the row", _sure_winners, shape=_WINNERS, presets=("real",))],
    dims={"out": ("row",)},
)
