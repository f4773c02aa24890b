"""Rotary position embedding (operators 3 and 4, chapter 06_rope): partial, rotate-half ("NeoX") RoPE.

Qwen3.5 rotates only the first rotary_dim = 64 of the 256 dims of each q and k head, pairing dim i with
dim i + 32 (not 2i with 2i + 1 as GPT-J did), by the angle pos * theta^(-2i/64), theta = 1e7:

    y[i]      = x[i] * cos[pos, i]      - x[i + 32] * sin[pos, i]           i < 32
    y[i + 32] = x[i + 32] * cos[pos, i + 32] + x[i] * sin[pos, i + 32]
    y[64:]    = x[64:]                                                      (192 dims untouched)

cos and sin come from a [max_positions, rotary_dim] cache (`reference.rope_cache`; the model keeps it
in the activation dtype as transformers does, an fp32 cache is accepted too) and the positions from a
device tensor, so a decode step replayed from a CUDA graph reads the position that changes each step.

Grid (T,): one program rotates every head of one token: a [heads, rotary_dim / 2] tile per half, one
cos/sin row. All arithmetic in fp32, rounded once.

In place or out of place. The 192 pass-through dims need no work at all in place: `apply_rope_` reads
and writes 64 of the 256 dims, a quarter of the bytes `apply_rope` moves (it must copy the rest). The
model's q and k are fresh outputs of q_norm / k_norm that nobody else reads, so the in-place form is the
one the engine uses and the q_rope / k_rope slots time. q and k go through separate launches: each
arrives from its own norm, and the launch this saves is better saved by fusing RoPE into the q/k norm
(chapter 22_layer_fusion).

Positions outside the cache: checked on the host by default (`check_pos`, as the embedding's ids); the
kernel never reads outside the cache, a token with a bad position comes out as NaN.
"""
import torch
import triton
import triton.language as tl

from tritonllm_course import validate
from tritonllm_course.runtime import pdl_args
from tritonllm_course.triton_helpers import pdl_enter


@triton.jit
def rope_kernel(x_ptr, cos_ptr, sin_ptr, pos_ptr, out_ptr, heads, head_dim, half, num_positions,
                COPY_PASS: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr,
                BLOCK_P: tl.constexpr, PDL: tl.constexpr = False):
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    t = tl.program_id(0).to(tl.int64)
    h = tl.arange(0, BLOCK_H)                                     # [BLOCK_H] heads
    row = t * heads * head_dim + h[:, None] * head_dim            # [BLOCK_H, 1] start of each head
    # BEGIN SOLUTION: read this token's position; load the two halves x1 = x[:, :half], x2 = x[:, half:2*half]
    #   of every head and the matching halves of its cos/sin row (as fp32; NaN when the position is outside the cache);
    #   store x1*c1 - x2*s1 and x2*c2 + x1*s2
    i = tl.arange(0, BLOCK_R)                                     # [BLOCK_R] index within a half
    pos = tl.load(pos_ptr + t).to(tl.int64)
    valid = (pos >= 0) & (pos < num_positions)
    table = pos * 2 * half + i                                    # [BLOCK_R] first half of the row
    in_half = i < half
    # tl.where, not `in_half & valid`: triton 3.9's interpreter types a block `&` a scalar as an integer, no mask
    in_row = tl.where(valid, in_half, False)                     # [BLOCK_R]
    c1 = tl.load(cos_ptr + table, mask=in_row, other=float("nan")).to(tl.float32)
    c2 = tl.load(cos_ptr + table + half, mask=in_row, other=float("nan")).to(tl.float32)
    s1 = tl.load(sin_ptr + table, mask=in_row, other=float("nan")).to(tl.float32)
    s2 = tl.load(sin_ptr + table + half, mask=in_row, other=float("nan")).to(tl.float32)
    mask = (h < heads)[:, None] & in_half[None, :]                # [BLOCK_H, BLOCK_R]
    first = row + i[None, :]
    x1 = tl.load(x_ptr + first, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + first + half, mask=mask, other=0.0).to(tl.float32)
    y1 = x1 * c1[None, :] - x2 * s1[None, :]
    y2 = x2 * c2[None, :] + x1 * s2[None, :]
    tl.store(out_ptr + first, y1.to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(out_ptr + first + half, y2.to(out_ptr.dtype.element_ty), mask=mask)
    # END SOLUTION
    if COPY_PASS:   # out of place only: the dims past rotary_dim are copied unchanged
        j = 2 * half + tl.arange(0, BLOCK_P)
        keep = (h < heads)[:, None] & (j < head_dim)[None, :]     # [BLOCK_H, BLOCK_P]
        rest = tl.load(x_ptr + row + j[None, :], mask=keep)
        tl.store(out_ptr + row + j[None, :], rest, mask=keep)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pos: torch.Tensor,
               out: torch.Tensor | None = None, check_pos: bool = True) -> torch.Tensor:
    """Rotate-half RoPE on the first rotary_dim dims of every head; the other dims pass through.

    x:         [T, heads, head_dim] float, contiguous (q: [T, 8, 256], k: [T, 2, 256])
    cos, sin:  [max_positions, rotary_dim] float tables (`reference.rope_cache`), same dtype
    pos:       [T] int32 / int64 position of each token, in [0, max_positions)
    out:       x's shape and dtype, allocated when None; `out=x` rotates in place (see apply_rope_)
    check_pos: check the position range on the host first (a device sync on a GPU; skipped during
               CUDA-graph capture). Without it a position outside the table gives NaN for that token.
    """
    validate.tensor(x, "x", dtype=validate.FLOATS, ndim=3)
    validate.tensor(cos, "cos", dtype=validate.FLOATS, ndim=2)
    validate.tensor(sin, "sin", dtype=cos.dtype, shape=tuple(cos.shape))
    tokens, heads, head_dim = x.shape
    validate.tensor(pos, "pos", dtype=validate.INTS, shape=(tokens,))
    device = validate.same_device(x=x, cos=cos, sin=sin, pos=pos)
    num_positions, rotary_dim = cos.shape
    if rotary_dim % 2 or not 0 < rotary_dim <= head_dim:
        raise ValueError(f"cos/sin have rotary_dim {rotary_dim}; it must be even and in [2, head_dim = "
                         f"{head_dim}]")
    out = validate.output(out, "out", tuple(x.shape), x.dtype, device)
    validate.disjoint({"out": out}, {"x": x, "cos": cos, "sin": sin, "pos": pos}, same=("x",))
    in_place = out.data_ptr() == x.data_ptr()
    if check_pos:
        validate.device_range(pos, 0, num_positions - 1, "position", "beyond the cos/sin cache")
    if x.numel() == 0:
        return out
    half = rotary_dim // 2
    block_h, block_r = triton.next_power_of_2(heads), triton.next_power_of_2(half)
    num_warps = min(8, max(1, block_h * block_r // 256))   # 8 elements per thread and half
    rope_kernel[(tokens,)](x, cos, sin, pos, out, heads, head_dim, half, num_positions,
                           COPY_PASS=not in_place and rotary_dim < head_dim, BLOCK_H=block_h,
                           BLOCK_R=block_r, BLOCK_P=triton.next_power_of_2(max(1, head_dim - rotary_dim)),
                           num_warps=num_warps, **pdl_args())
    return out


def apply_rope_(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pos: torch.Tensor,
                check_pos: bool = True) -> torch.Tensor:
    """`apply_rope` in place: rotates x's first rotary_dim dims of every head, returns x. The engine's form."""
    return apply_rope(x, cos, sin, pos, out=x, check_pos=check_pos)
