"""FlashAttention (chapter 23_flash_attention) beyond the generic slot check: every tile configuration gives the
reference, whatever the positions; blocks after the newest position are never read; large scores do
not overflow; a kernel without the rescale or with the mask off by one fails; bad input is named; and
(GPU) bf16 against PyTorch's scaled_dot_product_attention at the real shapes, fp32 at head_dim 256."""
import math

import pytest
import torch

from tritonllm_course import kernels, reference as R
from tritonllm_course.checking import check_fn
from tritonllm_course.runtime import runtime

H, KV, D = 6, 2, 32                # G = 3: rows of a block cut through a token's heads
DEV = runtime().device
SCALE = 1 / math.sqrt(D)


@pytest.fixture(scope="module")
def fa(rt):
    return kernels.load("flash_attention", "solutions").module


def _qkv(T, S, dtype=torch.float32, seed=0, heads=H, kv=KV, d=D):
    g = torch.Generator().manual_seed(seed)
    shapes = [(T, heads, d), (S, kv, d), (S, kv, d)]
    return tuple(torch.randn(shape, generator=g).to(DEV, dtype) for shape in shapes)


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def _config(bm, bn):
    return {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": 4, "num_stages": 1}


@pytest.mark.parametrize("bm,bn", [(16, 16), (64, 16), (16, 64), (64, 64), (128, 64)])
def test_every_tile_configuration_matches_the_reference(fa, bm, bn):
    # 23 new tokens after 41 cached ones: with 16-key blocks p_lo + 1 = 48 ends a block exactly, so a
    # row block whose oldest row is there has bulk blocks and a diagonal that starts on a boundary
    T, S = 23, 64
    q, k, v = _qkv(T, S)
    pos = torch.arange(S - T, S, dtype=torch.int32, device=DEV)
    ref = R.attention(q.double(), k.double(), v.double(), pos, SCALE)
    assert _rel(fa.flash_attention(q, k, v, pos, SCALE, config=_config(bm, bn)), ref) < 1e-5


def test_128_row_tiles_over_several_row_blocks(fa):
    """The long-prompt tile (128 GQA rows x 64 keys) with several row blocks per KV head, after cached
    tokens: 70 new tokens x 3 query heads per KV head = 210 rows, 2 blocks (a token's heads cut between
    them), the second partial."""
    T, S = 70, 101
    q, k, v = _qkv(T, S)
    pos = torch.arange(S - T, S, dtype=torch.int32, device=DEV)
    ref = R.attention(q.double(), k.double(), v.double(), pos, SCALE)
    assert _rel(fa.flash_attention(q, k, v, pos, SCALE, config=_config(128, 64)), ref) < 1e-5


def test_gpu_tiles_by_prompt_length(fa):
    """The GPU's choice (computed here, run above at the same sizes): 128-row tiles for long bf16 prompts
    once they make a full wave of programs, never in fp32 (a [128, 256] fp32 tile pair would not fit)."""
    long_bf16 = fa.flash_config(4096, 4, 2, 256, 2)
    assert (long_bf16["BLOCK_M"], long_bf16["BLOCK_N"]) == (128, 64)
    assert fa.flash_config(2048, 4, 2, 256, 2)["BLOCK_M"] == 64            # 128 programs: under a wave
    assert fa.flash_config(4096, 4, 2, 256, 4)["BLOCK_M"] == 64
    assert fa.flash_config(128, 4, 2, 256, 2)["BLOCK_M"] == 16
    # 64 x 64 tiles three deep where the shared memory holds them (224 KB: an H200's, not an A100's or in fp32)
    from tritonllm_course.triton_helpers import GPUS
    assert fa.flash_config(1024, 4, 2, 256, 2)["num_stages"] == 3
    assert fa.flash_config(1024, 4, 2, 256, 2, shared_bytes=GPUS[80].shared_bytes)["num_stages"] == 2
    assert fa.flash_config(1024, 4, 2, 256, 4)["num_stages"] == 2


def test_any_positions_not_only_a_staircase(fa):
    """pos is read per row: shuffled, repeated and gapped positions all give the reference."""
    T, S = 19, 50
    q, k, v = _qkv(T, S, seed=1)
    g = torch.Generator().manual_seed(2)
    pos = torch.randint(0, S, (T,), generator=g).to(DEV)
    pos[3] = 0                                          # a row that sees only key 0
    pos[7] = S - 1
    ref = R.attention(q.double(), k.double(), v.double(), pos, SCALE)
    for bm, bn in [(16, 16), (32, 64)]:
        assert _rel(fa.flash_attention(q, k, v, pos, SCALE, config=_config(bm, bn)), ref) < 1e-5


def test_keys_after_the_newest_position_are_never_read(fa):
    T, S, newest = 12, 70, 33
    q, k, v = _qkv(T, S, seed=3)
    pos = torch.arange(newest - T + 1, newest + 1, device=DEV)
    ref = R.attention(q.double(), k[:newest + 1].double(), v[:newest + 1].double(), pos, SCALE)
    k[newest + 1:], v[newest + 1:] = float("nan"), float("nan")
    out = fa.flash_attention(q, k, v, pos, SCALE, config=_config(16, 16))
    assert not out.isnan().any() and _rel(out, ref) < 1e-5


def test_large_scores_do_not_overflow(fa):
    T = S = 40
    q, k, v = _qkv(T, S, seed=4)
    q = q * 300                                         # scores in the thousands: exp() alone is inf
    pos = torch.arange(S, device=DEV)
    out = fa.flash_attention(q, k, v, pos, SCALE)
    assert not out.isnan().any() and _rel(out, R.attention(q.double(), k.double(), v.double(), pos, SCALE)) < 1e-4


def test_decode_shape_and_chapter_08_agree(fa):
    """T = 1 works (the model may route decode here) and equals chapter 08_attention's two-pass kernel."""
    attn = kernels.load("attention", "solutions").module
    q, k, v = _qkv(1, 29, seed=5)
    pos = torch.tensor([28], device=DEV)
    assert _rel(fa.flash_attention(q, k, v, pos, SCALE), attn.attention(q, k, v, pos, SCALE)) < 1e-5


def _inputs(shape, dtype, device, gen):
    T, S = 17, 40
    return {"q": torch.randn(T, H, D, generator=gen, dtype=dtype, device=device),
            "k": torch.randn(S, KV, D, generator=gen, dtype=dtype, device=device),
            "v": torch.randn(S, KV, D, generator=gen, dtype=dtype, device=device),
            "pos": torch.arange(S - T, S, device=device), "scale": SCALE}


def _blockwise(rescale: bool, strict: bool):
    """Flash attention in PyTorch, key blocks of 8, with two classic bugs as switches."""
    def run(q, k, v, pos, scale, out):
        G = q.shape[1] // k.shape[1]
        kk, vv = k.repeat_interleave(G, 1).float(), v.repeat_interleave(G, 1).float()   # [S, H, D]
        m = torch.full(q.shape[:2], float("-inf"), device=q.device)                       # [T, H]
        l = torch.zeros(q.shape[:2], device=q.device)
        acc = torch.zeros(q.shape, device=q.device)
        for n0 in range(0, k.shape[0], 8):
            n = torch.arange(n0, min(n0 + 8, k.shape[0]), device=q.device)
            s = torch.einsum("thd,nhd->thn", q.float(), kk[n]) * scale                  # [T, H, 8]
            visible = (n[None, :] < pos[:, None]) if strict else (n[None, :] <= pos[:, None])
            s = s.masked_fill(~visible[:, None, :], float("-inf"))
            m_new = torch.maximum(m, s.amax(-1))
            alpha = torch.exp(m - m_new).nan_to_num(0.0)
            p = torch.exp(s - m_new[..., None]).nan_to_num(0.0)
            l = l * alpha + p.sum(-1)
            acc = (acc * alpha[..., None] if rescale else acc) + torch.einsum("thn,nhd->thd", p, vv[n])
            m = m_new
        out.copy_(acc / l[..., None])
    return run


def test_the_check_catches_a_missing_rescale_and_an_off_by_one_mask(rt):
    out = lambda inp: {"out": torch.empty_like(inp["q"])}  # noqa: E731
    right = check_fn(_blockwise(True, False), R.attention, _inputs, out)
    assert right.passed, right
    no_rescale = check_fn(_blockwise(False, False), R.attention, _inputs, out)
    assert not no_rescale.passed and no_rescale.max_error > 0.05, no_rescale
    strict = check_fn(_blockwise(True, True), R.attention, _inputs, out)
    assert not strict.passed and strict.max_error > 0.05, strict


def test_the_output_gate_is_applied_from_a_strided_gate(fa):
    """The fast level's prompt: the gate read from the merged projection's output (a column slice), the
    output gated in the kernel; against attention then the output gate, one rounding fewer."""
    T, S = 23, 64
    q, k, v = _qkv(T, S, seed=5)
    merged = torch.randn(T, 3 * H * D + 5, device=DEV) * 2
    gate = merged[:, 5 + H * D:5 + 2 * H * D].view(T, H, D)                        # [T, H, D], token stride 3HD+5
    pos = torch.arange(S - T, S, device=DEV)
    out = torch.full_like(q, float("nan"))
    fa.flash_attention(q, k, v, pos, SCALE, out=out, gate=gate)
    want = R.output_gate(R.attention(q.double(), k.double(), v.double(), pos, SCALE), gate.double())
    assert _rel(out, want) < 1e-5
    with pytest.raises(ValueError, match="gate must be contiguous within each token"):
        fa.flash_attention(q, k, v, pos, SCALE, gate=merged[:, :2 * H * D:2].view(T, H, D))
    with pytest.raises(ValueError, match=r"gate has shape \[23, 6, 16\]"):
        fa.flash_attention(q, k, v, pos, SCALE, gate=gate[..., :16])


def test_bad_input_is_named(fa):
    q, k, v = _qkv(4, 6)
    pos = torch.arange(2, 6, device=DEV)
    with pytest.raises(ValueError, match="6 query heads are not a multiple of 4 KV heads"):
        fa.flash_attention(q, torch.randn(6, 4, D, device=DEV), torch.randn(6, 4, D, device=DEV), pos, SCALE)
    with pytest.raises(TypeError, match="v has dtype float16"):
        fa.flash_attention(q, k, v.half(), pos, SCALE)
    with pytest.raises(ValueError, match=r"position 6 is outside \[0, 5\]"):
        fa.flash_attention(q, k, v, pos + 1, SCALE)
    with pytest.raises(ValueError, match=r"pos has shape \[3\]"):
        fa.flash_attention(q, k, v, pos[:3], SCALE)
    big = _qkv(2, 3, d=512)
    with pytest.raises(ValueError, match="head_dim 512 is larger than 256"):
        fa.flash_attention(*big, torch.arange(1, 3, device=DEV), SCALE)
    with pytest.raises(ValueError, match="BLOCK_N = 8: tl.dot tiles need a power of two >= 16"):
        fa.flash_attention(q, k, v, pos, SCALE, config=_config(16, 8))


# --- GPU: the real shapes in bf16 against PyTorch, and fp32 at head_dim 256 ---------------------------
def _sdpa(q, k, v):
    """PyTorch's fused causal attention (queries at the last T positions of the S keys)."""
    T, S = q.shape[0], k.shape[0]
    mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)                 # [T, S]
    o = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],     # [1, heads, T|S, D]
        attn_mask=None if T == S else mask, is_causal=T == S, scale=1 / 16, enable_gqa=True)
    return o[0].transpose(0, 1)                                                           # [T, heads, D]


@pytest.mark.gpu
@pytest.mark.parametrize("T,S", [(128, 128), (1024, 1024), (4096, 4096), (100, 612)])
def test_matches_pytorch_sdpa_in_bf16(fa, rt, T, S):
    q, k, v = _qkv(T, S, dtype=torch.bfloat16, heads=8, kv=2, d=256)
    pos = torch.arange(S - T, S, device="cuda")
    out = fa.flash_attention(q, k, v, pos, 1 / 16)
    ref = R.attention(q.double(), k.double(), v.double(), pos, 1 / 16)
    assert _rel(out, ref) < 1e-2 and _rel(_sdpa(q, k, v), ref) < 1e-2


@pytest.mark.gpu
def test_fp32_at_head_dim_256_fits_the_gpu(fa, rt):
    """The model-swap checks run the full model in fp32: the fp32 tiles must fit in shared memory."""
    for T in (11, 1024):
        q, k, v = _qkv(T, T, dtype=torch.float32, heads=8, kv=2, d=256)
        pos = torch.arange(T, device="cuda")
        ref = R.attention(q.double(), k.double(), v.double(), pos, 1 / 16)
        assert _rel(fa.flash_attention(q, k, v, pos, 1 / 16), ref) < 1e-5
