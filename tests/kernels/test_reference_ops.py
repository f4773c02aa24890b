"""The reference operators against transformers' own Qwen3.5 functions and against each other."""
import math

import pytest
import torch
import torch.nn.functional as F
from transformers.models.qwen3_5 import modeling_qwen3_5 as hf

from tritonllm_course import reference as R
from tritonllm_course import slots
from tritonllm_course.slots import catalog
from helpers import rel


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


def randn(*shape, gen, dtype=torch.float32):
    return torch.randn(*shape, generator=gen, dtype=dtype)


def test_every_catalogued_slot_has_a_reference():
    catalogued = {name for name, *_ in catalog.CATALOG}
    assert catalogued <= {s.name for s in slots.all_slots()}
    assert all(callable(slots.get(name).reference) for name in catalogued)
    assert all(callable(s.reference) for s in slots.all_slots())


# norms ------------------------------------------------------------------------------------------

def test_rms_norm_is_zero_centred_like_transformers(gen):
    x, w = randn(5, 64, gen=gen), randn(64, gen=gen) * 0.5
    norm = hf.Qwen3_5RMSNorm(64, eps=1e-6)
    norm.weight.data.copy_(w)
    assert rel(R.rms_norm(x, w, 1e-6), norm(x)) < 1e-6
    plain = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w   # the Llama convention: wrong here
    assert rel(plain, norm(x)) > 0.1


def test_rms_norm_precision_rule(gen):
    x, w = randn(3, 32, gen=gen, dtype=torch.float64), randn(32, gen=gen, dtype=torch.float64)
    y = R.rms_norm(x, w)
    assert y.dtype == torch.float64
    exact = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1 + w)
    assert rel(y, exact) < 1e-14                       # fp64 stays fp64: no silent downcast
    assert R.rms_norm(x.bfloat16(), w.bfloat16()).dtype == torch.bfloat16


def test_qk_norm_per_head(gen):
    x, w = randn(4, 3, 16, gen=gen), randn(16, gen=gen)
    y = R.qk_norm(x, w)
    assert torch.equal(y[:, 1], R.rms_norm(x[:, 1], w))
    with pytest.raises(ValueError, match="heads"):
        R.qk_norm(x[0], w)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gated_rms_norm_like_transformers(gen, dtype):
    x, z, w = randn(6, 4, 32, gen=gen).to(dtype), randn(6, 4, 32, gen=gen).to(dtype), randn(32, gen=gen).to(dtype)
    norm = hf.Qwen3_5RMSNormGated(32, eps=1e-6).to(dtype)
    norm.weight.data.copy_(w)
    assert torch.equal(R.gated_rms_norm(x, z, w), norm(x, z))


def test_norm_errors_name_the_shapes(gen):
    with pytest.raises(ValueError, match=r"weight has shape \[16\]; expected \[32\]"):
        R.rms_norm(randn(2, 32, gen=gen), randn(16, gen=gen))
    with pytest.raises(ValueError, match="z has shape"):
        R.gated_rms_norm(randn(2, 32, gen=gen), randn(2, 16, gen=gen), randn(32, gen=gen))


# projections, embedding, MLP --------------------------------------------------------------------

def test_query_gate_interleaved_per_head():
    heads, d = 3, 4
    qg = torch.arange(heads * 2 * d, dtype=torch.float32)[None]          # one token, column = index
    q, gate = R.split_query_gate(qg, d)
    assert q.shape == (1, heads, d) and gate.shape == (1, heads * d)
    assert q[0, 1].tolist() == [8, 9, 10, 11]                           # head 1's query: [2hd, 2hd + d)
    assert gate[0, :d].tolist() == [4, 5, 6, 7]                         # head 0's gate follows its query


def test_attention_projection_matches_transformers(gen):
    from tritonllm_course.config import TINY
    from transformers import Qwen3_5TextConfig
    attn = hf.Qwen3_5Attention(Qwen3_5TextConfig(**TINY.to_hf_dict()), layer_idx=3)
    x = randn(5, TINY.hidden_size, gen=gen)
    q, gate, k, v = R.attention_qkv_proj(x, attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight,
                                         TINY.head_dim)
    hq, hgate = torch.chunk(attn.q_proj(x).view(5, -1, 2 * TINY.head_dim), 2, dim=-1)
    assert torch.equal(q, hq) and torch.equal(gate, hgate.reshape(5, -1))
    assert k.shape == v.shape == (5, TINY.num_key_value_heads, TINY.head_dim)


def test_embedding_and_lm_head(gen):
    table = randn(10, 8, gen=gen)
    ids = torch.tensor([3, 0, 9])
    assert torch.equal(R.embedding(ids, table), table[[3, 0, 9]])
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        R.embedding(torch.tensor([10]), table)
    assert torch.allclose(R.lm_head(table[:2], table), table[:2] @ table.T)


def test_mlp_like_transformers(gen):
    from transformers import Qwen3_5TextConfig
    from tritonllm_course.config import TINY
    m = hf.Qwen3_5MLP(Qwen3_5TextConfig(**TINY.to_hf_dict()), TINY.intermediate_size)
    x = randn(3, TINY.hidden_size, gen=gen)
    out = R.mlp(x, m.gate_proj.weight, m.up_proj.weight, m.down_proj.weight)
    assert rel(out, m(x)) < 1e-6
    assert rel(R.gate_up_swiglu(x, m.gate_proj.weight, m.up_proj.weight),
               F.silu(m.gate_proj(x)) * m.up_proj(x)) < 1e-6


def test_residual_rms_norm(gen):
    x, r, w = randn(2, 16, gen=gen), randn(2, 16, gen=gen), randn(16, gen=gen)
    h, y = R.residual_rms_norm(x, r, w)
    assert torch.equal(h, x + r) and torch.equal(y, R.rms_norm(x + r, w))


# RoPE -------------------------------------------------------------------------------------------

def test_rope_matches_transformers_partial_rotate_half(gen):
    from transformers import Qwen3_5TextConfig
    from tritonllm_course.config import TINY
    rot = hf.Qwen3_5TextRotaryEmbedding(Qwen3_5TextConfig(**TINY.to_hf_dict()))
    T, heads, d = 7, TINY.num_attention_heads, TINY.head_dim
    q, k = randn(T, heads, d, gen=gen), randn(T, 2, d, gen=gen)
    pos = torch.arange(40, 40 + T)
    cos, sin = rot(q, pos[None])                                          # [1, T, rotary_dim]
    hq, hk = hf.apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos, sin)
    c, s = R.rope_cache(64, TINY.rotary_dim, TINY.rope_theta)
    assert rel(R.apply_rope(q, c, s, pos), hq[0].transpose(0, 1)) < 1e-6
    assert rel(R.apply_rope(k, c, s, pos), hk[0].transpose(0, 1)) < 1e-6
    assert torch.equal(R.apply_rope(q, c, s, pos)[..., TINY.rotary_dim:], q[..., TINY.rotary_dim:])


def test_gptj_rope_is_a_different_rotation(gen):
    q = randn(5, 2, 32, gen=gen, dtype=torch.float64)
    c, s = R.rope_cache(16, 16, 1e4, dtype=torch.float64)
    pos = torch.arange(3, 8)
    right, wrong = R.apply_rope(q, c, s, pos), R.apply_rope_interleaved(q, c, s, pos)
    assert torch.allclose(wrong.norm(dim=-1), q.norm(dim=-1))           # still a rotation...
    assert rel(wrong, right) > 0.05                                      # ...of the wrong pairs
    zero = torch.zeros(5, dtype=torch.long)
    assert torch.equal(R.apply_rope_interleaved(q, c, s, zero), q)      # position 0: both are identity


# attention --------------------------------------------------------------------------------------

def test_attention_matches_sdpa_with_gqa(gen):
    T, heads, kv, d = 9, 4, 2, 16
    q, k, v = randn(T, heads, d, gen=gen), randn(T, kv, d, gen=gen), randn(T, kv, d, gen=gen)
    out = R.attention(q, k, v, torch.arange(T), d ** -0.5)
    expected = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                              is_causal=True, enable_gqa=True).transpose(0, 1)
    assert rel(out, expected) < 1e-6


def test_mask_softmax_pieces(gen):
    pos = torch.tensor([2, 3])
    mask = R.causal_mask(pos, 5)
    assert mask.tolist() == [[True, True, True, False, False], [True, True, True, True, False]]
    p = R.masked_softmax(randn(3, 2, 5, gen=gen), mask, 0.25)
    assert torch.all(p[..., ~mask] == 0) and torch.allclose(p.sum(-1), torch.ones(3, 2))
    s = randn(2, 6, gen=gen)
    assert torch.allclose(R.scaled_softmax(s, 0.5), torch.softmax(s * 0.5, -1))
    with pytest.raises(ValueError, match="mask has shape"):
        R.masked_softmax(randn(3, 2, 5, gen=gen), mask[:, :4], 1.0)


def test_kv_cache_and_decode_attention(gen):
    S, kv, heads, d = 16, 2, 4, 8
    k_cache, v_cache = torch.zeros(S, kv, d), torch.zeros(S, kv, d)
    k, v, q = randn(6, kv, d, gen=gen), randn(6, kv, d, gen=gen), randn(6, heads, d, gen=gen)
    R.kv_cache_write(k[:5], v[:5], k_cache, v_cache, torch.arange(5))           # prefill
    R.kv_cache_write(k[5:], v[5:], k_cache, v_cache, torch.tensor([5]))         # one decode token
    keys, values = R.kv_cache_read(k_cache, v_cache, torch.tensor([6]))
    assert torch.equal(keys, k) and torch.equal(values, v) and torch.all(k_cache[6:] == 0)
    full = R.attention(q, k, v, torch.arange(6), d ** -0.5)
    last = R.decode_attention(q[5], k_cache, v_cache, 6, d ** -0.5)
    assert rel(last, full[5]) < 1e-6
    with pytest.raises(ValueError, match="past the end of the cache"):
        R.kv_cache_write(k[:1], v[:1], k_cache, v_cache, torch.tensor([S]))


def test_output_gate(gen):
    o, g = randn(2, 8, gen=gen), randn(2, 8, gen=gen)
    assert torch.equal(R.output_gate(o, g), o * torch.sigmoid(g))


# DeltaNet: conv, gates, L2 norm --------------------------------------------------------------------

def test_conv1d_prefill_matches_transformers(gen):
    T, C, K = 11, 24, 4
    x, w = randn(T, C, gen=gen), randn(C, K, gen=gen)
    y, state = R.conv1d_prefill(x, w)
    expected = hf.causal_conv1d_fn(x.T[None], w, None, activation="silu")[0].T
    assert rel(y, expected) < 1e-6
    assert torch.equal(state, x[-K:].T)                                  # the last K inputs, newest last
    y_short, state_short = R.conv1d_prefill(x[:2], w)
    assert torch.equal(state_short[:, :2], torch.zeros(C, 2)) and torch.equal(state_short[:, 2:], x[:2].T)


def test_conv1d_state_carries_across_calls(gen):
    T, C, K = 9, 16, 4
    x, w = randn(T, C, gen=gen), randn(C, K, gen=gen)
    whole, _ = R.conv1d_prefill(x, w)
    first, state = R.conv1d_prefill(x[:5], w)
    second, state = R.conv1d_prefill(x[5:7], w, state)                  # a multi-token continuation
    steps = []
    for t in range(7, T):
        hf_state = state[None].clone()
        y, state = R.conv1d_decode(x[t:t + 1], w, state)
        ref = hf.causal_conv1d_update(x[t:t + 1].T[None], hf_state, w, None, "silu")[0].T
        assert rel(y, ref) < 1e-6 and torch.equal(state, hf_state[0])   # same rolling state as transformers
        steps.append(y)
    assert rel(torch.cat([first, second, *steps]), whole) < 1e-6


def test_deltanet_gates(gen):
    b, a = randn(5, 4, gen=gen), randn(5, 4, gen=gen)
    A_log, dt_bias = torch.rand(4, generator=gen).mul(16).add(0.01).log(), torch.ones(4)
    beta, g = R.deltanet_gates(b.bfloat16(), a.bfloat16(), A_log, dt_bias.bfloat16())
    assert beta.dtype == torch.bfloat16 and g.dtype == torch.float32     # g stays fp32
    expected = -A_log.exp() * F.softplus(a.bfloat16().float() + 1.0)
    assert torch.equal(g, expected) and torch.all(g <= 0)


def test_l2norm_qk(gen):
    q, k = randn(3, 2, 16, gen=gen, dtype=torch.float64), randn(3, 2, 16, gen=gen, dtype=torch.float64)
    qn, kn = R.l2norm_qk(q, k)
    assert torch.allclose(kn.norm(dim=-1), torch.ones(3, 2, dtype=torch.float64))
    assert torch.allclose(qn.norm(dim=-1), torch.full((3, 2), 16 ** -0.5, dtype=torch.float64))
    assert rel(kn, hf.l2norm(k)) < 1e-15


# the gated delta rule ------------------------------------------------------------------------------

def delta_inputs(T, H=2, HV=4, Dk=16, Dv=8, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    q, k = randn(T, H, Dk, gen=gen, dtype=dtype), randn(T, H, Dk, gen=gen, dtype=dtype)
    v = randn(T, HV, Dv, gen=gen, dtype=dtype)
    g = -torch.rand(T, HV, generator=gen, dtype=dtype) * 0.5
    beta = torch.rand(T, HV, generator=gen, dtype=dtype)
    state = randn(HV, Dk, Dv, gen=gen, dtype=dtype)
    return q, k, v, g, beta, state


@pytest.mark.parametrize("T", [1, 37, 64, 130])
def test_chunked_equals_recurrent_in_fp64(T):
    q, k, v, g, beta, state = delta_inputs(T)
    q, k = R.l2norm_qk(q, k)
    o1, s1 = R.gated_delta_rule_recurrent(q, k, v, g, beta, state)
    o2, s2 = R.gated_delta_rule_chunked(q, k, v, g, beta, state)
    assert o1.dtype == s1.dtype == torch.float64
    assert rel(o2, o1) < 1e-12 and rel(s2, s1) < 1e-12
    o3, _ = R.gated_delta_rule_chunked(q, k, v, g, beta, state, chunk_size=16)
    assert rel(o3, o1) < 1e-12


@pytest.mark.parametrize("T", [5, 67])
def test_delta_rule_matches_transformers(T):
    """HF computes in fp32 whatever the input, so agreement is to fp32 rounding. Its functions L2-normalise
    and scale q themselves; value heads = 2 x key heads, an initial state, lengths off the chunk grid."""
    q, k, v, g, beta, state = delta_inputs(T)
    qn, kn = R.l2norm_qk(q, k)
    o, s = R.gated_delta_rule_chunked(qn, kn, v, g, beta, state)
    o_r, s_r = R.gated_delta_rule_recurrent(qn, kn, v, g, beta, state)
    rep = v.shape[1] // q.shape[1]
    hf_args = dict(g=g[None], beta=beta[None], initial_state=state[None], output_final_state=True,
                   use_qk_l2norm_in_kernel=True)
    ho, hs = hf.torch_chunk_gated_delta_rule(q.repeat_interleave(rep, 1)[None], k.repeat_interleave(rep, 1)[None],
                                             v[None], **hf_args)
    ro, rs = hf.torch_recurrent_gated_delta_rule(q[None], k[None], v[None], **hf_args)
    for mine in (o, o_r):
        assert rel(mine, ho[0]) < 2e-6 and rel(mine, ro[0]) < 2e-6
    for mine in (s, s_r):
        assert rel(mine, hs[0]) < 2e-6 and rel(mine, rs[0]) < 2e-6


def test_delta_rule_value_head_uses_key_head_j_over_group():
    q, k, v, g, beta, _ = delta_inputs(6, H=2, HV=4)
    q, k = R.l2norm_qk(q, k)
    o, _ = R.gated_delta_rule_recurrent(q, k, v, g, beta)
    # value head 3 belongs to key head 1 (3 // 2): running that head alone must give the same output
    alone, _ = R.gated_delta_rule_recurrent(q[:, 1:2], k[:, 1:2], v[:, 3:4], g[:, 3:4], beta[:, 3:4])
    assert rel(o[:, 3:4], alone) < 1e-14


def test_delta_rule_state_splits_the_sequence():
    q, k, v, g, beta, state = delta_inputs(50)
    q, k = R.l2norm_qk(q, k)
    whole, s_whole = R.gated_delta_rule_chunked(q, k, v, g, beta, state)
    first, s = R.gated_delta_rule_chunked(q[:30], k[:30], v[:30], g[:30], beta[:30], state)
    second, s = R.gated_delta_rule_recurrent(q[30:], k[30:], v[30:], g[30:], beta[30:], s)
    assert rel(torch.cat([first, second]), whole) < 1e-12 and rel(s, s_whole) < 1e-12


def test_delta_rule_low_precision_in_fp32_out():
    q, k, v, g, beta, state = delta_inputs(9, dtype=torch.float32)
    o, s = R.gated_delta_rule_chunked(q.bfloat16(), k.bfloat16(), v.bfloat16(), g, beta.bfloat16(), state)
    assert o.dtype == torch.bfloat16 and s.dtype == torch.float32
    with pytest.raises(ValueError, match="initial_state has shape"):
        R.gated_delta_rule_recurrent(q, k, v, g, beta, state[:, :, :4])
    with pytest.raises(ValueError, match="not a multiple"):
        R.gated_delta_rule_recurrent(q, k, v[:, :3], g[:, :3], beta[:, :3])


# sampling ---------------------------------------------------------------------------------------

def test_argmax_lowest_index_on_ties():
    logits = torch.tensor([[0.0, 3.0, 1.0, 3.0], [5.0, 5.0, 5.0, 5.0]])
    assert R.argmax(logits).tolist() == [1, 0]
    with pytest.raises(ValueError, match="NaN"):
        R.argmax(torch.tensor([0.0, math.nan]))


def test_sampling_filters_and_seed(gen):
    logits = randn(1000, gen=gen) * 3
    top5 = set(torch.topk(logits, 5).indices.tolist())
    draws = [int(R.sample(logits, 1.0, top_k=5, generator=torch.Generator().manual_seed(s))) for s in range(50)]
    assert set(draws) <= top5 and len(set(draws)) > 1
    assert int(R.sample(logits, 1.0, top_p=1e-6, generator=gen)) == int(R.argmax(logits))
    assert int(R.sample(logits, 0.0)) == int(R.argmax(logits))
    a = R.sample(logits.expand(4, -1), 2.0, top_p=0.9, generator=torch.Generator().manual_seed(7))
    b = R.sample(logits.expand(4, -1), 2.0, top_p=0.9, generator=torch.Generator().manual_seed(7))
    assert a.shape == (4,) and torch.equal(a, b)


def test_top_p_keeps_the_smallest_nucleus():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    kept = torch.isfinite(R.top_k_top_p_filter(probs.log(), top_p=0.8))
    assert kept.tolist() == [True, True, False, False]
    kept = torch.isfinite(R.top_k_top_p_filter(probs.log(), top_p=0.81))
    assert kept.tolist() == [True, True, True, False]
