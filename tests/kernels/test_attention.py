"""Gated attention (chapter 08_attention) beyond the generic slot checks: the op-by-op pipeline equals the fused
kernels, decode equals prefill's last row, the checks catch the classic GQA and mask bugs, bad input
is named, and (GPU) decode attention replays from a CUDA graph with the length in device memory."""
import math

import pytest
import torch

from tritonllm_course import kernels, reference as R
from tritonllm_course.checking import check_fn
from tritonllm_course.runtime import runtime

H, KV, D = 4, 2, 32
DEV = runtime().device
SCALE = 1 / math.sqrt(D)


@pytest.fixture(scope="module")
def attn(rt):
    return kernels.load("attention", "solutions").module


def _qkv(T, S, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(T, H, D), (S, KV, D), (S, KV, D)]
    return tuple(torch.randn(shape, generator=g).to(DEV, dtype) for shape in shapes)


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def test_op_by_op_pipeline_equals_the_fused_kernels_and_the_reference(attn):
    T, S = 11, 19                                         # a prefill after 8 cached tokens
    q, k, v = _qkv(T, S)
    pos = torch.arange(S - T, S, dtype=torch.int32, device=DEV)
    probs = attn.masked_softmax(attn.qk_scores(q, k), attn.causal_mask(pos, S), SCALE)
    assert torch.allclose(probs.sum(-1), torch.ones(H, T, device=DEV))
    assert probs[:, 0, S - T + 1:].abs().max() == 0, "a masked key got probability"
    chained = attn.pv(probs, v)
    fused = attn.attention(q, k, v, pos, SCALE)
    ref = R.attention(q.double(), k.double(), v.double(), pos, SCALE)
    assert _rel(chained, ref) < 1e-5 and _rel(fused, ref) < 1e-5


def test_decode_equals_the_last_row_of_prefill(attn):
    S = 23
    q, k, v = _qkv(S, S)
    prefill = attn.attention(q, k, v, torch.arange(S, device=DEV), SCALE)
    cache_k = torch.full((40, KV, D), float("nan"), device=DEV)
    cache_v = torch.full((40, KV, D), float("nan"), device=DEV)
    cache_k[:S], cache_v[:S] = k, v
    decode = attn.decode_attention(q[-1], cache_k, cache_v, torch.tensor([S], device=DEV), SCALE)
    assert _rel(decode, prefill[-1]) < 1e-5
    # the length is read from memory: a shorter length is an earlier token's view of the same cache
    earlier = attn.decode_attention(q[5], cache_k, cache_v, torch.tensor([6], device=DEV), SCALE)
    assert _rel(earlier, prefill[5]) < 1e-5


def test_large_scores_do_not_overflow(attn):
    scores = torch.randn(H, 3, 50, device=DEV) * 1e4      # exp without the max subtraction is inf
    out = attn.scaled_softmax(scores, SCALE)
    # fp32 rounding of arguments in the thousands alone costs ~1e-4 (the fp64 reference has none)
    assert not out.isnan().any() and _rel(out, R.scaled_softmax(scores.double(), SCALE)) < 1e-3


def _scores_with_kv_head(mapping):
    """qk_scores through the solution, but with query head h reading KV head mapping(h)."""
    def run(q, k, out):
        heads = q.shape[1]
        k_per_head = torch.stack([k[:, mapping(h, heads, k.shape[1])] for h in range(heads)], dim=1)
        return kernels.get("attention", "qk_scores", "solutions")(q, k_per_head.contiguous(), out=out)
    return run


def _qk_inputs(shape, dtype, device, gen):
    return {"q": torch.randn(5, H, D, generator=gen, dtype=dtype, device=device),
            "k": torch.randn(9, KV, D, generator=gen, dtype=dtype, device=device)}


def _qk_out(inp):
    return {"out": inp["q"].new_empty(H, 5, 9)}


def test_the_check_catches_the_wrong_kv_head(rt):
    right = check_fn(_scores_with_kv_head(lambda h, n, kv: h // (n // kv)), R.qk_scores, _qk_inputs, _qk_out)
    wrong = check_fn(_scores_with_kv_head(lambda h, n, kv: h % kv), R.qk_scores, _qk_inputs, _qk_out)
    assert right.passed, right
    assert not wrong.passed and wrong.max_error > 0.5, wrong


def test_a_missing_mask_is_caught_and_spares_only_the_last_row(attn):
    T = S = 9
    q, k, v = _qkv(T, S)
    unmasked = attn.pv(attn.scaled_softmax(attn.qk_scores(q, k), SCALE), v)
    ref = R.attention(q, k, v, torch.arange(S, device=DEV), SCALE)
    assert _rel(unmasked, ref) > 0.3
    assert _rel(unmasked[-1], ref[-1]) < 1e-5, "the last token sees every key either way"


def test_output_gate_matches_the_model_formula(attn):
    o, gate = torch.randn(3, 64, device=DEV), torch.randn(3, 64, device=DEV) * 4
    assert _rel(attn.output_gate(o, gate), o * torch.sigmoid(gate)) < 1e-6


def test_output_gate_reads_the_gate_at_its_token_stride(attn):
    """The engine's gate is a column slice of the merged in-projection: tokens 4 * 70 + 9 values apart."""
    merged = torch.randn(5, 4 * 70 + 9, device=DEV) * 4
    o, gate = torch.randn(5, 2, 70, device=DEV), merged[:, 9:9 + 140].view(5, 2, 70)     # [T, heads, dim]
    out = torch.full_like(o, float("nan"))
    attn.output_gate(o, gate, out=out)
    assert _rel(out, o * torch.sigmoid(gate)) < 1e-6
    with pytest.raises(ValueError, match="gate must be contiguous within each token"):
        attn.output_gate(o, merged[:, :280:2].view(5, 2, 70))


def test_bad_input_is_named(attn):
    q, k, v = _qkv(4, 6)
    with pytest.raises(ValueError, match="4 query heads are not a multiple of 3 KV heads"):
        attn.qk_scores(q, torch.randn(6, 3, D, device=DEV))
    with pytest.raises(TypeError, match="k has dtype float16"):
        attn.qk_scores(q, k.half())
    with pytest.raises(ValueError, match="p has 6 keys but v has 5 rows"):
        attn.pv(torch.rand(H, 4, 6, device=DEV), v[:5])
    with pytest.raises(ValueError, match=r"mask has shape \[4, 5\]"):
        attn.masked_softmax(torch.randn(H, 4, 6, device=DEV), torch.ones(4, 5, dtype=torch.bool, device=DEV),
                            SCALE)
    with pytest.raises(ValueError, match=r"position 6 is outside \[0, 5\]"):
        attn.attention(q, k, v, torch.arange(3, 7, device=DEV), SCALE)
    cache = torch.randn(8, KV, D, device=DEV)
    with pytest.raises(ValueError, match=r"length 9 is outside \[1, 8\]"):
        attn.decode_attention(q[0], cache, cache, torch.tensor([9], device=DEV), SCALE)
    with pytest.raises(ValueError, match=r"length 0 is outside"):
        attn.decode_attention(q[0], cache, cache, 0, SCALE)
    with pytest.raises(ValueError, match=r"gate has shape \[2, 3\]"):
        attn.output_gate(torch.randn(3, 2, device=DEV), torch.randn(2, 3, device=DEV))


@pytest.mark.gpu
def test_decode_attention_replays_from_a_cuda_graph(attn, rt):
    heads, kv, d, max_len = 8, 2, 256, 512
    q = torch.randn(heads, d, device="cuda", dtype=rt.dtype)
    kc = torch.randn(max_len, kv, d, device="cuda", dtype=rt.dtype)
    vc = torch.randn(max_len, kv, d, device="cuda", dtype=rt.dtype)
    length = torch.tensor([1], dtype=torch.int32, device="cuda")
    out = torch.empty_like(q)
    attn.decode_attention(q, kc, vc, length, 1 / 16, out=out)       # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        attn.decode_attention(q, kc, vc, length, 1 / 16, out=out)
    for n in (1, 77, 300, max_len):
        length.fill_(n)
        graph.replay()
        ref = R.decode_attention(q, kc, vc, n, 1 / 16)
        assert _rel(out, ref) < 2e-2, n
