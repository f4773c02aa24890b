"""The static KV cache of the gated attention layers (operators 18 and 19, chapter 07_kv_cache).

Each of the 6 attention layers owns two buffers allocated once, K and V, each [max_len, kv_heads,
head_dim] = [max_len, 2, 256] in the model dtype. Row p holds the token at position p.

Layout. Token-major ([max_len, 2, 256], not head-major [2, max_len, 256]):
- a write is one contiguous row of kv_heads * head_dim = 512 elements (1 KB in bf16), the same layout
  the k/v projections produce ([T, 2, 256]), so a prefill write is one contiguous block copy;
- the decode read stays coalesced: the program of KV head g reads, for every cached token, the 256
  contiguous elements of its head, 512 bytes = four whole 128-byte lines. Head-major would make each
  program's stream one long range instead of 512-byte pieces, which only helps DRAM page locality a
  little; both layouts read every byte of a line they fetch.

Positions live in device memory. A decode step runs inside a CUDA graph, which replays the recorded
kernel launches with the arguments they were captured with: a Python int position would be frozen at
capture time. The kernels therefore read `pos` (write) and `length` (read) from int tensors that the
engine updates in place between replays.
"""
import torch
import triton
import triton.language as tl

from tritonllm_course import validate
from tritonllm_course.runtime import pdl_args
from tritonllm_course.triton_helpers import pdl_enter

COPY_BLOCK = 2048   # elements per program of the read: 16 per thread at 4 warps (two 16-byte bf16 loads)


@triton.jit
def kv_cache_write_kernel(k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, pos_ptr, max_len, sk, sv,
                          ROW: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    """Copy token t's k and v rows ([ROW] = kv_heads * head_dim each, contiguous; token t's starts at
    t * sk, t * sv) into cache row pos[t]."""
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    # BEGIN EXERCISE: token t = program id; its position from pos_ptr (device memory);
    #   copy k[t] and v[t] (ROW elements each, from t * sk and t * sv) to cache row pos;
    #   never store outside 0 <= pos < max_len
    raise NotImplementedError("exercise kv_cache.py, kv_cache_write_kernel: not implemented yet")
    # END EXERCISE


@triton.jit
def kv_cache_read_kernel(k_cache_ptr, v_cache_ptr, k_out_ptr, v_out_ptr, length_ptr, rows,
                         ROW: tl.constexpr, BLOCK: tl.constexpr):
    """Copy the first min(length, rows) cache rows into k_out/v_out [rows, ROW]; later rows become 0.

    Axis 0 walks the flat [rows * ROW] output in BLOCK pieces, axis 1 picks K (0) or V (1).
    """
    # BEGIN EXERCISE: this program's flat offsets; length from device memory; pick K or V by program_id(1);
    #   load where the row < length, store everywhere (0 past length)
    raise NotImplementedError("exercise kv_cache.py, kv_cache_read_kernel: not implemented yet")
    # END EXERCISE


def _check_cache(k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    validate.tensor(k_cache, "k_cache", dtype=validate.FLOATS, ndim=3)
    validate.tensor(v_cache, "v_cache", dtype=k_cache.dtype, shape=tuple(k_cache.shape))


def kv_cache_write(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   pos: torch.Tensor):
    """Operator 18: store the new keys and values at their positions, in place.

    k, v:             [T, kv_heads, head_dim] (decode T = 1, prefill T = prompt length); each token's
                      rows contiguous, tokens at any stride (v may be a column slice of the projection)
    k_cache, v_cache: [max_len, kv_heads, head_dim], same dtype as k and v, updated in place
    pos:              [T] int32/int64 positions in device memory (distinct)
    returns (k_cache, v_cache).
    """
    _check_cache(k_cache, v_cache)
    max_len, kv_heads, head_dim = k_cache.shape
    validate.tensor(k, "k", dtype=k_cache.dtype, shape=(None, kv_heads, head_dim), contiguous=False)
    T = k.shape[0]
    validate.tensor(v, "v", dtype=k_cache.dtype, shape=(T, kv_heads, head_dim), contiguous=False)
    validate.token_rows(k, "k")
    validate.token_rows(v, "v")
    validate.tensor(pos, "pos", dtype=validate.INTS, shape=(T,))
    validate.same_device(k=k, v=v, k_cache=k_cache, v_cache=v_cache, pos=pos)
    validate.disjoint({"k_cache": k_cache, "v_cache": v_cache}, {"k": k, "v": v, "pos": pos})
    validate.device_range(pos, 0, max_len - 1, "position",
                f"the KV cache holds {max_len} rows; the sequence is longer than it was allocated for")
    validate.device_distinct(pos, "position", "each token is stored at a row of its own")
    row = kv_heads * head_dim
    if T == 0 or row == 0:        # nothing to store (a row of no element failed in the kernel's arange)
        return k_cache, v_cache
    kv_cache_write_kernel[(T,)](k, v, k_cache, v_cache, pos, max_len, k.stride(0), v.stride(0), ROW=row,
                                BLOCK=triton.next_power_of_2(row), num_warps=4, **pdl_args())
    return k_cache, v_cache


def kv_cache_read(k_cache: torch.Tensor, v_cache: torch.Tensor, length,
                  k_out: torch.Tensor | None = None, v_out: torch.Tensor | None = None):
    """Operator 19 as a separate kernel: gather the first `length` cached rows into contiguous buffers.

    k_cache, v_cache: [max_len, kv_heads, head_dim]
    length:           int, or a 1-element int tensor in device memory (tokens in the cache)
    k_out, v_out:     [rows, kv_heads, head_dim] buffers; rows past `length` are set to 0. Allocated with
                      rows = length when None (which reads a device `length` on the host: a sync).
    returns (k_out, v_out). Chapter 08_attention's decode attention reads the cache in place instead.
    """
    _check_cache(k_cache, v_cache)
    max_len, kv_heads, head_dim = k_cache.shape
    device = validate.same_device(k_cache=k_cache, v_cache=v_cache)
    if isinstance(length, torch.Tensor):
        validate.tensor(length, "length", dtype=validate.INTS, shape=(1,), device=device.type)
        length_t = length
    else:
        length = validate.check_count(length, "length")        # an int: True read one row, 2.5 two
        if length > max_len:
            raise ValueError(f"length is {length}: cannot read {length} rows from a cache of {max_len} rows")
        length_t = torch.tensor([length], dtype=torch.int32, device=device)
    if k_out is None and v_out is None:
        rows = int(length_t[0])
    else:
        if k_out is None or v_out is None:
            raise ValueError("give both k_out and v_out, or neither")
        rows = validate.tensor(k_out, "k_out", ndim=3).shape[0]
    if not 0 <= rows <= max_len:
        raise ValueError(f"cannot read {rows} rows from a cache of {max_len} rows")
    k_out = validate.output(k_out, "k_out", (rows, kv_heads, head_dim), k_cache.dtype, device)
    v_out = validate.output(v_out, "v_out", (rows, kv_heads, head_dim), k_cache.dtype, device)
    validate.disjoint({"k_out": k_out, "v_out": v_out}, {"k_cache": k_cache, "v_cache": v_cache, "length": length})
    row = kv_heads * head_dim
    if rows:
        grid = (triton.cdiv(rows * row, COPY_BLOCK), 2)
        kv_cache_read_kernel[grid](k_cache, v_cache, k_out, v_out, length_t, rows, ROW=row, BLOCK=COPY_BLOCK,
                                   num_warps=4)
    return k_out, v_out
