"""The causal depthwise conv1d of the Gated DeltaNet layers, then SiLU (chapter 13_conv1d).

Each of the conv_dim = 6144 channels of in_proj_qkv's output (q, k and v) is filtered over time by its
own K = 4 taps, causally:

    y[t, c] = silu( sum_j w[c, j] * xx[t - K + 1 + j, c] )        w[:, K-1] multiplies the current token

where xx is the input with the conv state in front of it: the state [C, K] holds the K inputs before
this call, newest last, so xx[-i, c] = state[c, K - i]. Only state columns 1..K-1 are ever read;
column 0 is kept because that is the layout of transformers' cache (and of the course's model).

Prefill: a 2-D grid of [BLOCK_T tokens, BLOCK_C channels] tiles. A tile makes K loads of x, each shifted
one token further back; the K - 1 rows above the tile come from the neighbouring tile's rows (L1/L2 hits)
or, before token 0, from the state. The programs of the last token block also write the new state (the
last K inputs of cat(state, x)) into a separate buffer: programs of the first token block may still be
reading the old one.

Decode: one token, the state updated in place: shift left by one column, x into the last column, and
the output is the conv over the new state. The blocks are 1-D over channels, so one thread owns all K
columns of its channels: it reads a column before it overwrites it, which makes in place safe.

Fused (chapter 17_deltanet_layer): conv + SiLU + the L2 norm of q and k, written straight into q [T, H, D], k and v.
One program per head of D = 128 channels, so the norm is a reduction inside the program, and q and k
never make a round trip through memory before it; v, which needs no norm, goes in chunks of D channels
too, whatever its own head dim.
"""
import torch
import triton
import triton.language as tl

from tritonllm_course import validate
from tritonllm_course.runtime import pdl_args
from tritonllm_course.triton_helpers import l2_normalize_rows, pdl_enter, silu


@triton.jit
def conv_prefill_tile(x_ptr, stride_xt, w_ptr, state_ptr, t, c, cmask, T,
                      K: tl.constexpr, HAS_STATE: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
    """The conv (before SiLU) of tokens t [BLOCK_T] and channels c [BLOCK_C] (where cmask), in fp32."""
    # BEGIN SOLUTION: for each tap j, the source token s = t - (K - 1) + j: read x[s, c] where 0 <= s < T,
    #   state[c, K + s] where s < 0 (only if HAS_STATE; else the zero padding); accumulate w[c, j] * input in fp32
    acc = tl.zeros([BLOCK_T, BLOCK_C], dtype=tl.float32)
    for j in tl.static_range(K):
        s = t - (K - 1) + j                                                    # [BLOCK_T] source tokens
        inside = (s >= 0) & (s < T)
        v = tl.load(x_ptr + s.to(tl.int64)[:, None] * stride_xt + c[None, :],
                    mask=inside[:, None] & cmask[None, :], other=0.0).to(tl.float32)
        if HAS_STATE:  # tokens before this call: state column K + s (1 .. K-1)
            v += tl.load(state_ptr + c[None, :] * K + (K + s)[:, None],
                         mask=(s < 0)[:, None] & cmask[None, :], other=0.0).to(tl.float32)
        w = tl.load(w_ptr + c * K + j, mask=cmask, other=0.0).to(tl.float32)    # [BLOCK_C]
        acc += v * w[None, :]
    return acc
    # END SOLUTION


@triton.jit
def conv_prefill_new_state(x_ptr, stride_xt, state_ptr, new_state_ptr, c, cmask, T,
                           K: tl.constexpr, HAS_STATE: tl.constexpr):
    """new_state[c, i] = input T - K + i of cat(state, x): the last K inputs, newest last."""
    # BEGIN SOLUTION: column i holds token s = T - K + i: x[s] when s >= 0, else the old state column K + s
    #   (zeros without a state); store into new_state[c, i]
    for i in tl.static_range(K):
        s = T - K + i
        # tl.where, not `cmask & (s >= 0)`: triton 3.9's interpreter types a block `&` a scalar as an integer
        v = tl.load(x_ptr + s * stride_xt + c, mask=tl.where(s >= 0, cmask, False), other=0.0)
        if HAS_STATE:
            old = tl.load(state_ptr + c * K + (K + s), mask=tl.where(s < 0, cmask, False), other=0.0)
            v = tl.where(s >= 0, v, old)
        tl.store(new_state_ptr + c * K + i, v, mask=cmask)
    # END SOLUTION


@triton.jit
def conv_decode_step(x_ptr, w_ptr, state_ptr, c, cmask, K: tl.constexpr, BLOCK_C: tl.constexpr):
    """One token through channels c [BLOCK_C] (where cmask): shifts the state in place, returns the conv
    in fp32."""
    # BEGIN SOLUTION: window column i = state column i + 1 (i < K - 1), then x;
    #   write window column i into state column i (each thread reads a column before it overwrites it);
    #   return sum_i w[c, i] * window_i in fp32
    acc = tl.zeros([BLOCK_C], dtype=tl.float32)
    for i in tl.static_range(K):
        if i < K - 1:
            v = tl.load(state_ptr + c * K + (i + 1), mask=cmask, other=0.0)
        else:
            v = tl.load(x_ptr + c, mask=cmask, other=0.0)
        tl.store(state_ptr + c * K + i, v, mask=cmask)
        acc += v.to(tl.float32) * tl.load(w_ptr + c * K + i, mask=cmask, other=0.0).to(tl.float32)
    return acc
    # END SOLUTION


@triton.jit
def conv1d_prefill_kernel(x_ptr, w_ptr, state_ptr, out_ptr, new_state_ptr, T, C, stride_xt,
                          K: tl.constexpr, HAS_STATE: tl.constexpr,
                          BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
    t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)                      # [BLOCK_T] tokens
    c = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)                      # [BLOCK_C] channels
    cmask = c < C
    y = silu(conv_prefill_tile(x_ptr, stride_xt, w_ptr, state_ptr, t, c, cmask, T, K, HAS_STATE, BLOCK_T, BLOCK_C))
    tl.store(out_ptr + t.to(tl.int64)[:, None] * C + c[None, :], y.to(out_ptr.dtype.element_ty),
             mask=(t < T)[:, None] & cmask[None, :])
    if tl.program_id(1) == tl.num_programs(1) - 1:
        conv_prefill_new_state(x_ptr, stride_xt, state_ptr, new_state_ptr, c, cmask, T, K, HAS_STATE)


@triton.jit
def conv1d_decode_kernel(x_ptr, w_ptr, state_ptr, out_ptr, C, K: tl.constexpr, BLOCK_C: tl.constexpr):
    c = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    y = silu(conv_decode_step(x_ptr, w_ptr, state_ptr, c, c < C, K, BLOCK_C))
    tl.store(out_ptr + c, y.to(out_ptr.dtype.element_ty), mask=c < C)


@triton.jit
def store_qkv(y, t, T, head, d, c, cmask, C, H, D, q_ptr, k_ptr, v_ptr, q_scale, eps):
    """y [BLOCK_T, BLOCK_D] = conv output of head slot `head`: L2-normalise it if it is a q or k head
    (q also scaled), and store it into q [T, H, D], k [T, H, D] or v [T, C - 2HD]."""
    t64 = t.to(tl.int64)[:, None]
    mask = (t < T)[:, None] & cmask[None, :]
    if head < 2 * H:
        unit = l2_normalize_rows(y, eps)       # masked lanes hold silu(0) = 0: they add nothing
        if head < H:
            tl.store(q_ptr + t64 * (H * D) + head * D + d[None, :],
                     (unit * q_scale).to(q_ptr.dtype.element_ty), mask=mask)
        else:
            tl.store(k_ptr + t64 * (H * D) + (head - H) * D + d[None, :],
                     unit.to(k_ptr.dtype.element_ty), mask=mask)
    else:
        value_dim = C - 2 * H * D
        tl.store(v_ptr + t64 * value_dim + (c - 2 * H * D)[None, :], y.to(v_ptr.dtype.element_ty), mask=mask)


@triton.jit
def conv1d_l2norm_prefill_kernel(x_ptr, w_ptr, state_ptr, new_state_ptr, q_ptr, k_ptr, v_ptr,
                                  T, C, stride_xt, H, D, q_scale, eps,
                                  K: tl.constexpr, HAS_STATE: tl.constexpr,
                                  BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr, PDL: tl.constexpr = False):
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    head = tl.program_id(0)           # 0..H-1: q heads, H..2H-1: k heads, then v in chunks of D channels
    t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    d = tl.arange(0, BLOCK_D)
    c = head * D + d
    cmask = (d < D) & (c < C)                                                   # this head's channels only
    y = silu(conv_prefill_tile(x_ptr, stride_xt, w_ptr, state_ptr, t, c, cmask, T, K, HAS_STATE, BLOCK_T, BLOCK_D))
    store_qkv(y, t, T, head, d, c, cmask, C, H, D, q_ptr, k_ptr, v_ptr, q_scale, eps)
    if tl.program_id(1) == tl.num_programs(1) - 1:
        conv_prefill_new_state(x_ptr, stride_xt, state_ptr, new_state_ptr, c, cmask, T, K, HAS_STATE)


@triton.jit
def conv1d_l2norm_decode_kernel(x_ptr, w_ptr, state_ptr, q_ptr, k_ptr, v_ptr, C, H, D, q_scale, eps,
                                K: tl.constexpr, BLOCK_D: tl.constexpr):
    head = tl.program_id(0)
    d = tl.arange(0, BLOCK_D)
    c = head * D + d
    cmask = (d < D) & (c < C)         # exactly this head's channels: the state is shifted in place
    y = silu(conv_decode_step(x_ptr, w_ptr, state_ptr, c, cmask, K, BLOCK_D))  # [BLOCK_D]
    store_qkv(y[None, :], tl.arange(0, 1), 1, head, d, c, cmask, C, H, D, q_ptr, k_ptr, v_ptr, q_scale, eps)


# --- host side ------------------------------------------------------------------------------------
def _check_inputs(x, weight, conv_state, tokens=None):
    """Validate x [T, C] (rows may be strided: a view into a wider projection), weight [C, K], state [C, K]."""
    validate.tensor(x, "x", dtype=validate.FLOATS, ndim=2, contiguous=False)
    if x.shape[0] < 1:
        raise ValueError(f"x has shape {list(x.shape)}: give at least one token")
    if tokens is not None and x.shape[0] != tokens:
        raise ValueError(f"x has shape {list(x.shape)}; a decode step takes one token: [1, C]")
    if x.stride(1) != 1 and x.shape[1] > 1:
        raise ValueError(f"x must have contiguous channels (stride 1 along dim 1), got strides {x.stride()}")
    C = x.shape[1]
    validate.tensor(weight, "weight", dtype=validate.FLOATS)
    if weight.dim() != 2 or weight.shape[0] != C:
        raise ValueError(f"weight has shape {list(weight.shape)}; expected [{C}, K] for x of shape "
                         f"{list(x.shape)} (squeeze the checkpoint's [C, 1, K])")
    K = weight.shape[1]
    if C == 0 or K == 0:          # no channel divided by zero in the grid; no tap convolved nothing, unrefused
        raise ValueError(f"x has shape {list(x.shape)} and weight {list(weight.shape)}: give at least one channel "
                         "and one tap (C, K >= 1)")
    if conv_state is not None:
        validate.tensor(conv_state, "conv_state", dtype=x.dtype, shape=(C, K))
    device = validate.same_device(x=x, weight=weight, conv_state=conv_state)
    return C, K, device


def _new_state_buffer(new_state, conv_state, C, K, dtype, device):
    new_state = validate.output(new_state, "new_state", (C, K), dtype, device)
    if conv_state is not None and new_state.data_ptr() == conv_state.data_ptr():
        raise ValueError("new_state must not be conv_state itself: the programs of the last token block "
                         "write it while those of the first may still read the old state (conv1d_decode "
                         "updates a state in place)")
    return new_state


def _prefill_blocks(T: int):
    """Tokens per tile, and warps. Measured on an H200 (bf16, C = 6144): tiles of 16 tokens x 128 channels
    with 4 warps were the best of 4..64 x 128..512 (a sweep whose data was not kept; the kernel table,
    results/kernels_nvidia-h200_2026-11-30.json: T = 128: 3.7 us<!-- fig:ch13.prefill.t128.triton.us -->;
    T = 4096: 39.4 us<!-- fig:ch13.prefill.t4096.triton.us -->, 60%<!-- fig:ch13.prefill.t4096.triton.pct --> of
    the copy ceiling). The K shifted loads re-read each input K times from L1/L2: the likely limit, not HBM's (no
    saved profile measures it)."""
    return min(16, triton.next_power_of_2(T)), 4


def conv1d_prefill(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor | None = None,
                   out: torch.Tensor | None = None, new_state: torch.Tensor | None = None):
    """Causal depthwise conv over T tokens, then SiLU; also returns the new conv state.

    x:          [T, C] float, in_proj_qkv's output (channels contiguous; rows may be strided)
    weight:     [C, K] float (the checkpoint's conv1d.weight [C, 1, K] squeezed), read as fp32
    conv_state: [C, K] in x's dtype, the K inputs before x (newest last), or None (zeros: a new sequence)
    out:        [T, C] in x's dtype;  new_state: [C, K] in x's dtype, not conv_state itself
    returns (out, new_state): out = silu(conv) computed in fp32; new_state = last K inputs of cat(state, x).
    """
    C, K, device = _check_inputs(x, weight, conv_state)
    T = x.shape[0]
    out = validate.output(out, "out", (T, C), x.dtype, device)
    new_state = _new_state_buffer(new_state, conv_state, C, K, x.dtype, device)
    validate.disjoint({"out": out, "new_state": new_state}, {"x": x, "weight": weight, "conv_state": conv_state})
    block_c = min(128, triton.next_power_of_2(C))
    block_t, num_warps = _prefill_blocks(T)
    grid = (triton.cdiv(C, block_c), triton.cdiv(T, block_t))
    has_state = conv_state is not None
    conv1d_prefill_kernel[grid](x, weight, conv_state if has_state else x, out, new_state, T, C, x.stride(0),
                                K=K, HAS_STATE=has_state, BLOCK_T=block_t, BLOCK_C=block_c,
                                num_warps=num_warps)
    return out, new_state


def conv1d_decode(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor,
                  out: torch.Tensor | None = None):
    """One decode step: roll conv_state IN PLACE (drop the oldest column, append x), out = silu(conv).

    x:          [1, C] float, the new token's in_proj_qkv output
    weight:     [C, K] float
    conv_state: [C, K] in x's dtype, contiguous, newest column last (transformers' layout); updated in place
    out:        [1, C] in x's dtype
    returns (out, conv_state), like the reference (which returns the new state instead of writing it).
    """
    C, K, device = _check_inputs(x, weight, conv_state, tokens=1)
    out = validate.output(out, "out", (1, C), x.dtype, device)
    validate.disjoint({"out": out}, {"x": x, "weight": weight, "conv_state": conv_state})
    block_c = min(128, triton.next_power_of_2(C))    # 48 programs of 128 channels at C = 6144
    conv1d_decode_kernel[(triton.cdiv(C, block_c),)](x, weight, conv_state, out, C, K=K, BLOCK_C=block_c,
                                                     num_warps=4)
    return out, conv_state


def _buffer(buf, name, shape, dtype, device):
    """An output buffer: allocated in `dtype` when None, else any float dtype of the right shape."""
    if buf is None:
        return torch.empty(shape, dtype=dtype, device=device)
    return validate.tensor(buf, name, dtype=validate.FLOATS, shape=shape, device=device.type)


def _qkv_buffers(T, C, key_heads, head_dim, value_head_dim, eps, x, device, q, k, v):
    """Check the head split of C; the q and k (fp32 by default) and v (x's dtype) buffers; the grid size.

    One program per q head and k head (the L2 norm needs a whole head), and one per head_dim channels of
    v: v needs no norm, so its chunks need not be its heads, and every program has the same width. value_head_dim
    None is head_dim (0 is refused: it ran as that default); eps is checked here for both wrappers."""
    value_head_dim = head_dim if value_head_dim is None else value_head_dim
    for value, name in ((key_heads, "key_heads"), (head_dim, "head_dim"), (value_head_dim, "value_head_dim")):
        validate.check_count(value, name, least=1)     # None or "2" failed in a comparison, 1.5 in a shape
    validate.positive(eps, "eps")                      # a negative one was a NaN norm, None failed in the launch
    value_dim = C - 2 * key_heads * head_dim
    if value_dim <= 0 or value_dim % value_head_dim:
        raise ValueError(f"C = {C} channels do not split into q and k of {key_heads} x {head_dim} and a v "
                         f"of whole heads of {value_head_dim}")
    q = _buffer(q, "q", (T, key_heads, head_dim), torch.float32, device)
    k = _buffer(k, "k", (T, key_heads, head_dim), torch.float32, device)
    v = validate.output(v, "v", (T, value_dim // value_head_dim, value_head_dim), x.dtype, device)
    return q, k, v, 2 * key_heads + triton.cdiv(value_dim, head_dim)


def conv1d_l2norm_prefill(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor | None,
                          key_heads: int, head_dim: int, eps: float = 1e-6,
                          q: torch.Tensor | None = None, k: torch.Tensor | None = None,
                          v: torch.Tensor | None = None, new_state: torch.Tensor | None = None,
                          value_head_dim: int | None = None):
    """Fused prefill: conv + SiLU, split into q, k, v, L2 norm of q and k (q scaled by head_dim^-0.5).

    x, weight, conv_state: as `conv1d_prefill`, with C = 2 * key_heads * head_dim + value_heads * value_head_dim
    value_head_dim: v's head dim (default head_dim, as in Qwen3.5-0.8B)
    returns (q [T, key_heads, head_dim], k, v [T, value_heads, value_head_dim], new_state [C, K]); q and k
    are fp32 unless other buffers are given (the delta rule reads them in fp32), v is in x's dtype.
    """
    C, K, device = _check_inputs(x, weight, conv_state)
    T = x.shape[0]
    q, k, v, heads = _qkv_buffers(T, C, key_heads, head_dim, value_head_dim, eps, x, device, q, k, v)
    new_state = _new_state_buffer(new_state, conv_state, C, K, x.dtype, device)
    validate.disjoint({"q": q, "k": k, "v": v, "new_state": new_state},
                      {"x": x, "weight": weight, "conv_state": conv_state})
    block_d = triton.next_power_of_2(head_dim)
    block_t, num_warps = _prefill_blocks(T)
    has_state = conv_state is not None
    conv1d_l2norm_prefill_kernel[(heads, triton.cdiv(T, block_t))](
        x, weight, conv_state if has_state else x, new_state, q, k, v, T, C, x.stride(0), key_heads,
        head_dim, head_dim ** -0.5, eps, K=K, HAS_STATE=has_state, BLOCK_T=block_t, BLOCK_D=block_d,
        num_warps=num_warps, **pdl_args())
    return q, k, v, new_state


def conv1d_l2norm_decode(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor,
                         key_heads: int, head_dim: int, eps: float = 1e-6,
                         q: torch.Tensor | None = None, k: torch.Tensor | None = None,
                         v: torch.Tensor | None = None, value_head_dim: int | None = None):
    """Fused decode step: `conv1d_decode` (state rolled in place) + split + L2 norm of q and k, one launch.

    returns (q [1, key_heads, head_dim], k, v [1, value_heads, value_head_dim], conv_state); dtypes and
    value_head_dim as `conv1d_l2norm_prefill`.
    """
    C, K, device = _check_inputs(x, weight, conv_state, tokens=1)
    q, k, v, heads = _qkv_buffers(1, C, key_heads, head_dim, value_head_dim, eps, x, device, q, k, v)
    validate.disjoint({"q": q, "k": k, "v": v}, {"x": x, "weight": weight, "conv_state": conv_state})
    conv1d_l2norm_decode_kernel[(heads,)](x, weight, conv_state, q, k, v, C, key_heads, head_dim,
                                          head_dim ** -0.5, eps, K=K,
                                          BLOCK_D=triton.next_power_of_2(head_dim), num_warps=4)
    return q, k, v, conv_state
