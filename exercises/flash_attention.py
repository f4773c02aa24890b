"""FlashAttention for prefill (chapter 23_flash_attention): scores, causal mask, scaled softmax and P . V in one kernel,
one pass over the keys and values, nothing of size [T, S] ever written.

Shapes (batch 1, tokens first): q [T, heads, head_dim] at positions pos [T]; k, v [S, kv_heads, head_dim]
(the keys at positions 0 .. S-1, the new tokens included); out [T, heads, head_dim].

GQA as rows, as in chapter 08_attention: a program owns one KV head g and BLOCK_M rows, row r = token r // G,
query head g * G + r % G. Every K and V tile it loads serves the G query heads of the group at once.

Online softmax (chapter 08_attention's `attention.online_softmax_update`): per row a running max m, a running sum
l = sum exp2(s - m) and an unnormalised accumulator acc = sum exp2(s - m) v, rescaled by exp2(m - m')
whenever a key block raises the max to m'; one division by l at the end. Scores are in log2 units
(scale * log2(e) folded into one multiply), so every exponential is an exp2.

Causal block skipping. The rows of a block sit at positions p_lo .. p_hi. Keys after p_hi are visible
to none of them: their blocks are never loaded. Keys at or before p_lo are visible to all of them: those
whole blocks (the bulk) need no mask. Only the blocks in between, on the diagonal, compare key and
position. Programs start with the latest rows, which have the most keys, so the longest programs do not
run last on an otherwise idle GPU.
"""
import math

import torch
import triton
import triton.language as tl

from tritonllm_course import kernels, triton_helpers as helpers, validate
from tritonllm_course.runtime import pdl_args, runtime
from tritonllm_course.triton_helpers import pdl_enter, sigmoid

# chapter 08_attention's online softmax, from the learner's attention.py once written (`kernels.jit_function`)
online_softmax_update = kernels.jit_function("attention", "online_softmax_update", __file__)

LOG2E = math.log2(math.e)
SMS = 132                     # streaming multiprocessors of an H200: the grid is sized against them
MAX_HEAD_DIM = 256            # a whole head is one tile (q, K and V tiles are [rows, head_dim])
SMEM_BUDGET = 160 * 1024      # bytes of tiles per program: the q tile and `num_stages` K and V tiles


@triton.jit
def _attend(q, k_head, v_head, row_stride, pos, n0, n_end, d, d_ok, m, l, acc, scale_log2e,
            CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr):
    """Keys n0 .. n0+BLOCK_N-1 (those before n_end) of one KV head into the running softmax of a row
    block. k_head / v_head point at k[0, g] / v[0, g], rows row_stride apart; q [BLOCK_M, BLOCK_D].
    CAUSAL: the block straddles the diagonal, key n counts for a row only where n <= its position."""
    # BEGIN EXERCISE: load the K tile (rows before n_end), scores q . K^T in log2 units,
    #   -inf where CAUSAL and the key is after the row's position; load the V tile;
    #   fold into (m, l, acc) with online_softmax_update
    raise NotImplementedError("exercise flash_attention.py, _attend: not implemented yet")
    # END EXERCISE


@triton.jit
def flash_attention_kernel(q_ptr, k_ptr, v_ptr, pos_ptr, out_ptr, gate_ptr, T, S, H, KV, D, scale_log2e,
                           s_gate, G: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           BLOCK_D: tl.constexpr, HAS_GATE: tl.constexpr, PDL: tl.constexpr = False):
    """Causal attention of BLOCK_M (token, head) rows of one KV head over their keys, in one pass.

    1-D grid of KV heads x row blocks: program p has KV head p % KV and row block (last first) p // KV.
    HAS_GATE: the output multiplied by sigmoid(gate) (Qwen's output gate, fused); token t's gate row
    [heads * head_dim] starts at t * s_gate.
    """
    pdl_enter(PDL)   # with PDL: the next kernel may launch; wait for the previous one's stores
    # BEGIN EXERCISE: KV head and row block (latest first); rows -> (token, head);
    #   load the q tile and the rows' positions; p_hi = newest position (at most S-1), p_lo = oldest;
    #   bulk loop over the whole blocks before p_lo + 1 without the mask, diagonal loop up to p_hi with it;
    #   out = acc / l (the gate and the store to out[t, head] follow)
    raise NotImplementedError("exercise flash_attention.py, flash_attention_kernel: not implemented yet")
    # END EXERCISE
    tile_ok = r_ok[:, None] & d_ok[None, :]
    if HAS_GATE:    # the output gate on the tile in registers: one kernel and one rounding fewer
        gate_rows = t.to(tl.int64) * s_gate + head * D                                  # [BLOCK_M]
        out = out * sigmoid(tl.load(gate_ptr + gate_rows[:, None] + d[None, :], mask=tile_ok, other=0.0)
                            .to(tl.float32))
    tl.store(out_ptr + q_rows[:, None] + d[None, :], out.to(out_ptr.dtype.element_ty), mask=tile_ok)


def flash_config(T: int, G: int, KV: int, D: int, element_size: int, interpreted: bool = False,
                 shared_bytes: int | None = None) -> dict:
    """Tile sizes and launch parameters (reasoned for an H200; chapter 23_flash_attention measures the alternatives).

    Rows per program (BLOCK_M): 64 when that still gives half a wave of programs (for Qwen3.5 from
    T = 513 on: 2 KV heads x cdiv(4T, 64) row blocks >= 66), else 32 or 16, so a 128-token prompt has 64
    programs rather than 16. A [64, 256] fp32 accumulator is 128 registers a thread at 4 warps (64 at 8); the
    4-warp kernel fits in 255 registers without spilling on every GPU the course targets (`tritonllm-course
    targets`) and is the faster one: 37.4<!-- fig:flash4.tiles.t1024.m64n64w4.us --> against
    44.2 us<!-- fig:flash4.tiles.t1024.m64n64w8.us --> at T = 1,024 (chapter 23_flash_attention's tile table,
    results/flash_nvidia-h200_2026-12-04.json), so every block size gets 4 warps but the long prompts' 128 rows.
    A third stage for the 64 x 64 tiles where the GPU's shared memory holds it (224 KB in bf16: an H100's or
    H200's, past SMEM_BUDGET): 29.9<!-- fig:flash5.tiles.t1024.m64n64w4s3.us --> against
    36.6 us<!-- fig:flash5.tiles.t1024.m64n64w4s2.us --> at T = 1,024 and
    59.0<!-- fig:flash5.tiles.t2048.m64n64w4s3.us --> against 71.6 us<!-- fig:flash5.tiles.t2048.m64n64w4s2.us -->
    at 2,048 (results/flash_nvidia-h200_2026-12-05.json). Keys per step (BLOCK_N): 64, halved until the q tile and
    `num_stages` K and V tiles fit in SMEM_BUDGET: bf16 [64 + 2 x 2 x 64, 256] tiles are 160 KB of the
    H200's 227 KB; fp32 (the model-swap checks run in fp32) drops to 32- or 16-key steps. Under the CPU
    interpreter a program costs about the same whatever its size: there, 32 rows and 16 keys, so small
    tests still cross several blocks.
    Long prompts in bf16/fp16, once 128-row blocks alone make a full wave (Qwen3.5: T >= 2081), take
    128 x 64 tiles on 8 warps (192 KB of tiles, past the budget but within the H200's 227 KB): chapter
    23_flash_attention's tile table measured 147 us<!-- fig:code.flash_attention.t4096.m128.us --> at T = 4096
    against 234<!-- fig:code.flash_attention.t4096.m64w4.us -->-292 us<!-- fig:code.flash_attention.t4096.m64w8.us -->
    for 64 x 64 (results/flash_nvidia-h200_2026-12-04.json).
    shared_bytes: the GPU's shared memory a block (None: an H200's). Where it is less than the budget (an
    A100's 163 KB, an RTX card's or an L4's 99 KB, a T4's 64 KB) the tiles fit in it instead: no 128-row
    tiles, fewer keys per step, down to 16, and where even those do not fit beside the q tile, fewer rows.
    """
    if interpreted:
        return {"BLOCK_M": 32, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}
    block_d, stages = triton.next_power_of_2(D), 2
    long_tiles = element_size * block_d * (128 + 2 * stages * 64)
    if (element_size == 2 and D <= 256 and KV * triton.cdiv(T * G, 128) >= SMS
            and (shared_bytes is None or long_tiles <= shared_bytes)):
        return {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2}
    block_m = next((bm for bm in (64, 32) if KV * triton.cdiv(T * G, bm) >= SMS // 2), 16)
    budget = SMEM_BUDGET if shared_bytes is None else min(SMEM_BUDGET, shared_bytes)
    while block_m > 16 and element_size * block_d * (block_m + 2 * stages * 16) >= budget:
        block_m //= 2   # not even 16-key steps beside this q tile (a T4's 64 KB at D = 256): fewer rows
    block_n = helpers.rows_within(budget, 64, element_size * block_d, 2 * stages,
                                  fixed=element_size * block_d * block_m)
    deep = element_size * block_d * (64 + 2 * 3 * 64)      # 64 x 64 tiles three deep: 224 KB in bf16 at D = 256
    if (block_m, block_n, element_size) == (64, 64, 2) and deep <= (shared_bytes or helpers.GPUS[90].shared_bytes):
        stages = 3
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": 4,
            "num_stages": stages}


def _check_config(config: dict) -> dict:
    """Tile sizes given by hand: exactly these four keys, each value as `validate.tile_config` takes it."""
    keys = {"BLOCK_M", "BLOCK_N", "num_warps", "num_stages"}
    if set(validate.tile_config(config)) != keys:
        raise ValueError(f"config must have exactly the keys {sorted(keys)}, got {sorted(config)}")
    return config


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor, scale: float,
                    out: torch.Tensor | None = None, config: dict | None = None,
                    gate: torch.Tensor | None = None) -> torch.Tensor:
    """Causal attention in one pass (FlashAttention): q at positions pos over the keys/values 0 .. S-1.

    q: [T, heads, head_dim]; k, v: [S, kv_heads, head_dim], same dtype (the new tokens included)
    pos: [T] int positions, each in [0, S); out: [T, heads, head_dim] in q's dtype.
    config: tile sizes {BLOCK_M, BLOCK_N, num_warps, num_stages} instead of `flash_config`'s.
    gate: optional [T, heads, head_dim] in q's dtype, each token's rows contiguous at any token stride (a
          column slice of the merged projection): out = attention * sigmoid(gate), Qwen's output gate.
    """
    T, H, D, S, KV, device = validate.causal_attention(q, k, v, pos)
    validate.finite(scale, "scale")
    if D > MAX_HEAD_DIM:
        raise ValueError(f"head_dim {D} is larger than {MAX_HEAD_DIM}: the kernel keeps a whole head in one tile")
    s_gate = _check_gate(gate, (T, H, D), q.dtype, device)
    out = validate.output(out, "out", (T, H, D), q.dtype, device)
    validate.disjoint({"out": out}, {"q": q, "k": k, "v": v, "pos": pos, "gate": gate})
    G = H // KV
    gpu = helpers.gpu_of(device)
    cfg = dict(_check_config(config)) if config else flash_config(T, G, KV, D, q.element_size(),
                                                                  runtime().interpreted,
                                                                  None if gpu is None else gpu.shared_bytes)
    if out.numel():
        grid = (KV * triton.cdiv(T * G, cfg["BLOCK_M"]),)
        flash_attention_kernel[grid](q, k, v, pos, out, q if gate is None else gate, T, S, H, KV, D,
                                     scale * LOG2E, s_gate, G=G, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
                                     BLOCK_D=triton.next_power_of_2(D), HAS_GATE=gate is not None,
                                     num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **pdl_args())
    return out


def _check_gate(gate: torch.Tensor | None, shape: tuple, dtype: torch.dtype, device: torch.device) -> int:
    """The output gate's input: `shape`, `dtype`, on `device`, each token's rows contiguous. Returns its
    token stride (0 without a gate)."""
    if gate is None:
        return 0
    validate.tensor(gate, "gate", dtype=dtype, shape=shape, device=device.type, contiguous=False)
    validate.token_rows(gate, "gate")
    return gate.stride(0)
