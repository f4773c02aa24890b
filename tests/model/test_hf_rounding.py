"""`match_hf_rounding`: the operators whose bf16 results depend on where and in which order they round,
computed as transformers' torch path computes them, so that the reference model in bf16 reproduces
transformers' bf16 logits (tests/model/test_reference_model.py). On the CPU the results are bit-identical to
transformers' own functions; in fp64 the variants compute the same function as the default operators.
"""
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.models.qwen3_5 import modeling_qwen3_5 as hf

from tritonllm_course import reference as R
from tritonllm_course.config import TINY
from tritonllm_course.hf_compat import hf_model, to_dtype
from helpers import rel

BF16 = torch.bfloat16


def _randn(*shape, seed, dtype=BF16, scale=1.0):
    return (scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed))).to(dtype)


def test_to_dtype_keeps_the_rotary_frequencies_fp32():
    """`.to(torch.bfloat16)` rounds the RoPE inverse frequencies too; `from_pretrained` does not."""
    model = hf_model(TINY)
    fp32 = model.model.rotary_emb.inv_freq.clone()
    to_dtype(model, BF16)
    assert model.model.embed_tokens.weight.dtype == BF16
    assert model.model.rotary_emb.inv_freq.dtype == torch.float32
    assert torch.equal(model.model.rotary_emb.inv_freq, fp32)
    assert hf_model(TINY).to(BF16).model.rotary_emb.inv_freq.dtype == BF16
    assert hf_model(TINY, dtype=BF16).model.rotary_emb.inv_freq.dtype == torch.float32


# the conv ----------------------------------------------------------------------------------------

def test_conv1d_matches_transformers_bit_for_bit():
    T, C, K = 11, 64, 4
    x, w = _randn(T + 3, C, seed=0), _randn(C, K, seed=1, scale=0.5)
    for n in (T, 2):                                                    # a prompt, and one shorter than K
        y, state = R.conv1d_prefill(x[:n], w, match_hf_rounding=True)
        assert torch.equal(y, hf.causal_conv1d_fn(x[:n].T[None], w, None, activation="silu")[0].T)
        assert torch.equal(state, R.conv1d_prefill(x[:n], w)[1])        # the same state
    first, state = R.conv1d_prefill(x[:T], w, match_hf_rounding=True)
    y, new_state = R.conv1d_prefill(x[T:T + 2], w, state, match_hf_rounding=True)   # continuation
    full = torch.cat([state[None], x[T:T + 2].T[None]], dim=-1)
    assert torch.equal(y, hf.causal_conv1d_fn(full, w, None, activation="silu")[0, :, -2:].T)
    hf_state = new_state[None].clone()
    y, new_state = R.conv1d_decode(x[T + 2:], w, new_state, match_hf_rounding=True)
    assert torch.equal(y, hf.causal_conv1d_update(x[T + 2:].T[None], hf_state, w, None, "silu")[0].T)
    assert torch.equal(new_state, hf_state[0])
    # without it, bf16 rounds the conv once (after the SiLU) where transformers rounds twice
    assert not torch.equal(R.conv1d_prefill(x[:T], w)[0], first)


def test_conv1d_variants_agree_in_fp64():
    x, w = _randn(9, 16, seed=2, dtype=torch.float64), _randn(16, 4, seed=3, dtype=torch.float64)
    for kw in ({}, {"conv_state": _randn(16, 4, seed=4, dtype=torch.float64)}):
        (y1, s1), (y2, s2) = (R.conv1d_prefill(x, w, **kw, match_hf_rounding=m) for m in (False, True))
        assert rel(y2, y1) < 1e-14 and torch.equal(s2, s1)


# the delta rule ----------------------------------------------------------------------------------

def _rule_inputs(T, H=2, HV=4, D=32, dtype=BF16):
    """q, k, v, beta in `dtype`; g and the state in fp32 (fp64 for fp64). Value heads = 2 x key heads."""
    gen, work = torch.Generator().manual_seed(5), R.precision.acc_dtype(dtype)
    q, k = (torch.randn(T, H, D, generator=gen).to(dtype) for _ in range(2))
    v = torch.randn(T, HV, D, generator=gen).to(dtype)
    g = (-2 * torch.rand(T, HV, generator=gen)).to(work)
    beta = torch.rand(T, HV, generator=gen).to(dtype)
    return q, k, v, g, beta, (0.3 * torch.randn(HV, D, D, generator=gen)).to(work)


def test_delta_rule_matches_transformers_bit_for_bit():
    """bf16 q, k, v, beta as the model feeds them; transformers' functions L2-normalise q and k in fp32
    themselves, its chunked rule scales q by d^-0.5 and its recurrent rule divides it by sqrt(d)."""
    q, k, v, g, beta, state = _rule_inputs(67)
    hf_args = dict(g=g[None], beta=beta[None], initial_state=state[None], output_final_state=True,
                   use_qk_l2norm_in_kernel=True)
    ho, hs = hf.torch_chunk_gated_delta_rule(q[None], k[None], v[None], **hf_args)
    qn, kn = R.l2norm_qk(q.float(), k.float())
    o, s = R.gated_delta_rule_chunked(qn, kn, v, g, beta, state, match_hf_rounding=True)
    assert torch.equal(o, ho[0]) and torch.equal(s, hs[0])
    ro, rs = hf.torch_recurrent_gated_delta_rule(q[None, :3], k[None, :3], v[None, :3], g=g[None, :3],
                                                 beta=beta[None, :3], initial_state=hs, output_final_state=True,
                                                 use_qk_l2norm_in_kernel=True)
    q1, k1 = R.l2norm(q[:3].float()) / q.shape[-1] ** 0.5, R.l2norm(k[:3].float())
    o, s = R.gated_delta_rule_recurrent(q1, k1, v[:3], g[:3], beta[:3], s, match_hf_rounding=True)
    assert torch.equal(o, ro[0]) and torch.equal(s, rs[0])


def test_delta_rule_variants_agree_in_fp64():
    q, k, v, g, beta, state = _rule_inputs(70, dtype=torch.float64)
    q, k = R.l2norm_qk(q, k)
    for rule in (R.gated_delta_rule_chunked, R.gated_delta_rule_recurrent):
        (o1, s1), (o2, s2) = (rule(q, k, v, g, beta, state, match_hf_rounding=m) for m in (False, True))
        assert rel(o2, o1) < 1e-12 and rel(s2, s1) < 1e-12


# attention ---------------------------------------------------------------------------------------

class _Attn:                    # what transformers' attention functions read from the module
    num_key_value_groups, is_causal, training = 4, True, False


def _attention_inputs(dtype=BF16):
    S, heads, kv, d = 40, 8, 2, 64
    return (_randn(S, heads, d, seed=11, dtype=dtype), _randn(S, kv, d, seed=12, dtype=dtype),
            _randn(S, kv, d, seed=13, dtype=dtype), d ** -0.5)


def _heads_first(*xs):
    return (x.transpose(0, 1)[None] for x in xs)


def test_attention_matches_transformers_sdpa_and_eager_bit_for_bit():
    q, k, v, scale = _attention_inputs()
    S, T = q.shape[0], 6
    cases = {"prompt": (slice(0, S), None), "decode": (slice(S - 1, S), None),      # (queries, mask)
             "continuation": (slice(S - T, S), R.causal_mask(torch.arange(S - T, S), S)[None, None])}
    for name, (rows, mask) in cases.items():
        pos = torch.arange(S)[rows]
        ours = R.attention(q[rows], k, v, pos, scale, match_hf_rounding=True)
        theirs = sdpa_attention_forward(_Attn(), *_heads_first(q[rows], k, v), mask, scaling=scale)[0][0]
        assert torch.equal(ours, theirs), name
        additive = torch.zeros(len(pos), S, dtype=BF16).masked_fill(~R.causal_mask(pos, S), float("-inf"))
        eager = hf.eager_attention_forward(_Attn(), *_heads_first(q[rows], k, v), additive[None, None],
                                           scaling=scale)[0][0]
        assert torch.equal(R.attention(q[rows], k, v, pos, scale), eager), name   # the default: eager's rounding
        assert not torch.equal(eager, theirs), name


def test_attention_variants_agree_in_fp64():
    q, k, v, scale = _attention_inputs(torch.float64)
    for rows in (slice(0, 40), slice(39, 40), slice(30, 40)):
        pos = torch.arange(40)[rows]
        expected = R.attention(q[rows], k, v, pos, scale)
        assert rel(R.attention(q[rows], k, v, pos, scale, match_hf_rounding=True), expected) < 1e-12
