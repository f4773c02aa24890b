"""Slot specs of chapter 07: the static KV cache write (operator 18) and read (operator 19)."""
import torch

from .. import reference as R
from ..reference.attention_extra import kv_cache_read_static, kv_cache_write_static
from . import implement, tensor_bytes


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


def _read_inputs(shape, dtype, device, gen):
    k_cache, v_cache = _cache(shape, dtype, device, gen)
    n = shape["length"]
    k_cache[n:] = float("nan")     # rows past the length are garbage: never to be read
    v_cache[n:] = float("nan")
    return {"k_cache": k_cache, "v_cache": v_cache,
            "length": torch.tensor([n], dtype=torch.int32, device=device)}


def _read_out(inp):
    n = int(inp["length"][0])
    return {"k_out": torch.empty_like(inp["k_cache"][:n]), "v_out": torch.empty_like(inp["v_cache"][:n])}


implement(
    "cache_kv_write", family="kv_cache", function="kv_cache_write",
    reference=R.kv_cache_write, torch_impl=kv_cache_write_static,
    make_inputs=_write_inputs, mutated=("k_cache", "v_cache"),
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
    reference=R.kv_cache_read, torch_impl=kv_cache_read_static,
    make_inputs=_read_inputs, make_out=_read_out,
    shapes={"tiny": [{"length": 37, "kv_heads": 2, "head_dim": 32, "max_len": 45},
                     {"length": 1, "kv_heads": 3, "head_dim": 24, "max_len": 19}],
            "real": [{"length": 4096, "kv_heads": 2, "head_dim": 256, "max_len": 4096},
                     {"length": 1024, "kv_heads": 2, "head_dim": 256, "max_len": 4096},
                     {"length": 128, "kv_heads": 2, "head_dim": 256, "max_len": 4096}]},
    # the first `length` rows of K and V read, and written again as a contiguous copy
    bytes=lambda inp: 2 * 2 * tensor_bytes(inp["k_cache"][:int(inp["length"][0])]),
)
