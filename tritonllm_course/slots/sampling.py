"""Slot specs of operator 17: the greedy argmax (exact), and the device sampler checked exactly against a
reference given the same Gumbel noise."""
import torch

from . import implement, tensor_bytes
from .. import kernels
from ..reference import argmax, sample
from ..reference.sampling_extra import sample_with_noise


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


def _sampling_inputs(shape, dtype, device, gen):
    logits = (3 * torch.randn(shape["rows"], shape["vocab"], generator=gen, device=device)).to(dtype)
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen, device=device))
    return {"logits": logits, "temperature": shape["temperature"], "top_k": shape["top_k"],
            "top_p": shape["top_p"], "seed": seed}


def _sampling_reference(logits, temperature, top_k, top_p, seed):
    """The same draw from PyTorch: the kernel's noise (from the seed), the filter as a threshold."""
    gumbel_noise = kernels.get("sampling", "gumbel_noise")
    noise = gumbel_noise(seed, logits.shape[0], logits.shape[-1], logits.device)
    return sample_with_noise(logits, noise, temperature, top_k, top_p)


def _out(inp):
    return {"out": torch.empty(inp["logits"].shape[:-1], dtype=torch.int64, device=inp["logits"].device)}


implement(
    "argmax_sample", family="sampling", function="argmax",
    reference=lambda logits, num_blocks=None: argmax(logits),    # num_blocks: how the kernel splits the row
    torch_impl=lambda logits: torch.argmax(logits, dim=-1),   # the reference's NaN check syncs the host
    make_inputs=_logits_with_ties,
    make_out=_out,
    exact=True,
    # tiny 2: two blocks of two 2048-wide tiles each, so lanes see several elements
    shapes={"tiny": [{"rows": 1, "vocab": 1000}, {"rows": 3, "vocab": 5003, "num_blocks": 2}],
            "real": [{"rows": 1, "vocab": 248320}, {"rows": 128, "vocab": 248320}]},
    bytes=lambda inp: tensor_bytes(inp["logits"]) + 8 * inp["logits"].shape[0],
)

implement(
    "argmax_sample.sample", title="temperature / top-k / top-p sampling", op=17,
    qwen="Gumbel-max on the device, top-k / top-p as a threshold found without sorting",
    chapter="12_sampling", family="sampling", function="sample",
    reference=_sampling_reference,
    # PyTorch's way: sort, softmax, cumsum, multinomial
    torch_impl=lambda logits, temperature, top_k, top_p, seed: sample(logits, temperature, top_k, top_p),
    make_inputs=_sampling_inputs,
    make_out=_out,
    exact=True,
    shapes={"tiny": [{"rows": 2, "vocab": 777, "temperature": 0.8, "top_k": 40, "top_p": 0.9},
                     {"rows": 1, "vocab": 3001, "temperature": 1.3, "top_k": 0, "top_p": 0.8}],
            "real": [{"rows": 1, "vocab": 248320, "temperature": 0.7, "top_k": 50, "top_p": 0.9},
                     {"rows": 1, "vocab": 248320, "temperature": 1.0, "top_k": 0, "top_p": 0.95},
                     {"rows": 1, "vocab": 248320, "temperature": 1.0, "top_k": 0, "top_p": 1.0}]},
    bytes=lambda inp: tensor_bytes(inp["logits"]) + 8 * inp["logits"].shape[0],   # the logits, read once
)
