"""Slot specs of chapter 07_kv_cache: the static KV cache write (operator 18) and read (operator 19)."""
import torch

from .. import reference as R
from ..reference.attention import kv_cache_read_static, kv_cache_write_static
from . import Edge, implement, tensor_bytes


def _cache(shape, dtype, device, gen):
    """K and V caches [max_len, kv_heads, head_dim] full of old values (rows the kernel must keep)."""
    size = (shape["max_len"], shape["kv_heads"], shape["head_dim"])
    return (torch.randn(size, dtype=dtype, device=device, generator=gen),
            torch.randn(size, dtype=dtype, device=device, generator=gen))


def _write_inputs(shape, dtype, device, gen):
    T, L = shape["tokens"], shape["max_len"]
    k_cache, v_cache = _cache(shape, dtype, device, gen)
    size = (T, shape["kv_heads"], shape["head_dim"])
    start = int(torch.randint(0, L - T + 1, (1,), generator=gen, device=device))
    return {"k": torch.randn(size, dtype=dtype, device=device, generator=gen),
            "v": torch.randn(size, dtype=dtype, device=device, generator=gen),
            "k_cache": k_cache, "v_cache": v_cache,
            "pos": torch.arange(start, start + T, dtype=torch.int32, device=device)}   # device positions


def _first_and_last_rows(inputs, shape, dtype, gen):
    """Two tokens at the last cache row and at row 0, in that order: positions are any distinct rows,
    not a run from pos[0], and a bound check off by one at either end drops a row."""
    pos = inputs["pos"]
    inputs["pos"] = torch.tensor([shape["max_len"] - 1, 0], dtype=pos.dtype, device=pos.device)
    return inputs


def _strided_tokens(inputs, shape, dtype, gen):
    """k and v as column slices of wider projection outputs, each at its own token stride (neither is
    the row kv_heads * head_dim): a kernel that assumes packed tokens, or one stride for both, reads
    the wrong rows."""
    for key, width in (("k", 2), ("v", 3)):
        x = inputs[key]
        T, row = x.shape[0], x.shape[1] * x.shape[2]
        wide = torch.randn(T, width * row, generator=gen, device=x.device).to(dtype)
        inputs[key] = wide[:, row:2 * row].unflatten(1, x.shape[1:])     # [T, kv_heads, head_dim] view
    return inputs


def _read_inputs(shape, dtype, device, gen):
    k_cache, v_cache = _cache(shape, dtype, device, gen)
    n = shape["length"]
    k_cache[n:] = float("nan")     # rows past the length are garbage: never to be read
    v_cache[n:] = float("nan")
    return {"k_cache": k_cache, "v_cache": v_cache,
            "length": torch.tensor([n], dtype=torch.int32, device=device)}


def _read_out(inp):
    if "k_out" in inp:   # the buffers of the edge below
        return {"k_out": inp["k_out"], "v_out": inp["v_out"]}
    n = int(inp["length"][0])
    return {"k_out": torch.empty_like(inp["k_cache"][:n]), "v_out": torch.empty_like(inp["v_cache"][:n])}


def _whole_cache_buffers(inputs, shape, dtype, gen):
    """Output buffers of all max_len rows, as a CUDA graph keeps them: rows past the length must come out
    0, and must not be read (they hold NaN). With rows == length a kernel that ignores the length
    passes."""
    inputs["k_out"] = torch.empty_like(inputs["k_cache"])
    inputs["v_out"] = torch.empty_like(inputs["v_cache"])
    return inputs


def _read_reference(k_cache, v_cache, length, k_out=None, v_out=None):
    """The first `length` rows, then zero rows up to the buffers' rows (when buffers are given)."""
    k, v = R.kv_cache_read(k_cache, v_cache, length)
    rows = k.shape[0] if k_out is None else k_out.shape[0]
    return tuple(torch.cat([x, x.new_zeros(rows - x.shape[0], *x.shape[1:])]) for x in (k, v))


implement(
    "cache_kv_write", family="kv_cache", function="kv_cache_write",
    reference=R.kv_cache_write, torch_impl=kv_cache_write_static,
    make_inputs=_write_inputs, mutated=("k_cache", "v_cache"),
    edges=[Edge("rows max_len - 1 and 0", _first_and_last_rows, shape={"tokens": 2}),
           Edge("strided k and v", _strided_tokens, shape={"tokens": 5})],
    dims={"k_cache": ("position", "kv head", "dim"), "v_cache": ("position", "kv head", "dim")},
    shapes={"tiny": [{"tokens": 1, "kv_heads": 2, "head_dim": 32, "max_len": 45},
                     {"tokens": 37, "kv_heads": 2, "head_dim": 32, "max_len": 45},
                     {"tokens": 5, "kv_heads": 3, "head_dim": 24, "max_len": 19}],
            "real": [{"tokens": 1, "kv_heads": 2, "head_dim": 256, "max_len": 4096},
                     {"tokens": 128, "kv_heads": 2, "head_dim": 256, "max_len": 4096}]},
    # read k and v, write the same bytes into the cache; the rest of the cache is not touched
    bytes=lambda inp: 4 * tensor_bytes(inp["k"]) + tensor_bytes(inp["pos"]),
)

implement(
    "cache_kv_read", family="kv_cache", function="kv_cache_read",
    reference=_read_reference, torch_impl=kv_cache_read_static,
    make_inputs=_read_inputs, make_out=_read_out,
    edges=[Edge("buffers of max_len rows", _whole_cache_buffers, presets=("tiny",)),
           Edge("buffers of max_len rows", _whole_cache_buffers, shape={"length": 4000}, presets=("real",))],
    dims={"k_out": ("position", "kv head", "dim"), "v_out": ("position", "kv head", "dim")},
    shapes={"tiny": [{"length": 37, "kv_heads": 2, "head_dim": 32, "max_len": 45},
                     {"length": 1, "kv_heads": 3, "head_dim": 24, "max_len": 19}],
            "real": [{"length": 4096, "kv_heads": 2, "head_dim": 256, "max_len": 4096},
                     {"length": 1024, "kv_heads": 2, "head_dim": 256, "max_len": 4096},
                     {"length": 128, "kv_heads": 2, "head_dim": 256, "max_len": 4096}]},
    # the first `length` rows of K and V read, and written again as a contiguous copy
    bytes=lambda inp: 2 * 2 * tensor_bytes(inp["k_cache"][:int(inp["length"][0])]),
)
