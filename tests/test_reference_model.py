"""The reference model against transformers' Qwen3_5ForCausalLM: logits, cached decode, greedy tokens."""
import copy

import pytest
import torch

from tritonllm_course.config import QWEN35_0_8B, TINY
from tritonllm_course.generation import generate
from tritonllm_course.hf_compat import hf_forward, hf_model, weights_from_hf
from tritonllm_course.model import Qwen35Cache, Qwen35Model
from tritonllm_course.weights import WeightError
from helpers import rel


@pytest.fixture(scope="module")
def pair():
    """transformers' tiny model (norm weights perturbed so 1 + w versus w matters) and ours on its weights."""
    hf = hf_model(TINY, seed=0, perturb_norms=0.3, init_std=0.1)
    return hf, Qwen35Model(TINY, weights_from_hf(hf))


@pytest.fixture(scope="module")
def prompt():
    return torch.randint(0, TINY.vocab_size, (67,), generator=torch.Generator().manual_seed(1))


def test_prefill_logits_match_transformers(pair, prompt):
    hf, model = pair
    expected, _ = hf_forward(hf, prompt)
    logits = model(prompt, all_logits=True)
    assert logits.shape == (67, TINY.vocab_size)
    assert rel(logits, expected) < 1e-5
    assert rel(model(prompt), logits[-1:]) < 1e-6


def test_prefill_then_cached_decode_match_transformers(pair, prompt):
    hf, model = pair
    cache = model.new_cache(80)
    got = [model(prompt[:50], cache, all_logits=True),      # prefill
           model(prompt[50:60], cache, all_logits=True)]    # multi-token continuation (chunked rule + state)
    got += [model(prompt[t:t + 1], cache) for t in range(60, 67)]   # decode steps
    assert cache.length == 67
    expected, hf_cache = hf_forward(hf, prompt[:50])
    steps = [expected, hf_forward(hf, prompt[50:60], hf_cache)[0]]
    steps += [hf_forward(hf, prompt[t:t + 1], hf_cache)[0] for t in range(60, 67)]
    for mine, theirs in zip(got, steps):
        assert rel(mine, theirs) < 1e-5


def test_greedy_tokens_match_transformers_generate(pair, prompt):
    hf, model = pair
    ours = generate(model, prompt[:20], 32, eos_token_id=None)
    theirs = hf.generate(prompt[None, :20], max_new_tokens=32, min_new_tokens=32, do_sample=False,
                         use_cache=True)[0, 20:].tolist()
    assert len(ours) == 32 and len(set(ours)) > 4              # a varied sequence, not one token repeated
    assert ours == theirs


def test_generate_stops_at_eos(pair, prompt):
    _, model = pair
    free = generate(model, prompt[:20], 12, eos_token_id=None)
    stopped = generate(model, prompt[:20], 12, eos_token_id=free[3])
    assert stopped == free[:free.index(free[3]) + 1]


def test_cache_reset_and_overflow(pair, prompt):
    _, model = pair
    cache = model.new_cache(20)
    first = model(prompt[:20], cache)
    with pytest.raises(ValueError, match="exceed the cache of 20 tokens"):
        model(prompt[:1], cache)
    cache.reset()
    assert cache.length == 0 and torch.equal(model(prompt[:20], cache), first)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        Qwen35Cache.allocate(TINY, TINY.max_position_embeddings + 1)


def test_model_rejects_mis_shaped_weights(pair):
    hf, _ = pair
    weights = weights_from_hf(hf)
    weights["layers.3.self_attn.q_proj.weight"] = weights["layers.3.self_attn.q_proj.weight"][:, :-1]
    with pytest.raises(WeightError, match=r"layers\.3\.self_attn\.q_proj\.weight has shape \[256, 127\]; "
                                          r"the config expects \[256, 128\]"):
        Qwen35Model(TINY, weights)


@pytest.mark.gpu
def test_full_size_matches_transformers_on_gpu():
    """Real Qwen3.5-0.8B shapes, random weights: a 128-token prefill, then 64 cached decode steps.

    fp32: ours against transformers' to 1e-4. bf16: at these shapes bf16 rounding alone moves the logits
    of transformers' own bf16 model by ~4% from its fp32 run (24 random layers amplify it), so ours must be
    as close to the fp32 logits as transformers' bf16 is (within 1.5x) and near transformers' bf16 itself.
    """
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        hf32 = hf_model(QWEN35_0_8B, dtype=torch.float32, device="cuda", seed=0, perturb_norms=0.1)
        weights = weights_from_hf(hf32)
        ours32 = Qwen35Model(QWEN35_0_8B, weights)
        hf16 = copy.deepcopy(hf32).to(torch.bfloat16)
        ours16 = Qwen35Model(QWEN35_0_8B, {k: v.to(torch.bfloat16) for k, v in weights.items()})
        caches = {"ours32": ours32.new_cache(192), "ours16": ours16.new_cache(192), "hf32": None, "hf16": None}
        tokens = torch.randint(0, QWEN35_0_8B.vocab_size, (128,), generator=torch.Generator().manual_seed(0))
        for step in range(65):              # the prefill, then decode steps fed the fp32 argmax
            ref, caches["hf32"] = hf_forward(hf32, tokens, caches["hf32"])
            half, caches["hf16"] = hf_forward(hf16, tokens, caches["hf16"])
            mine32 = ours32(tokens, caches["ours32"], all_logits=True)
            mine16 = ours16(tokens, caches["ours16"], all_logits=True)
            assert rel(mine32, ref) < 1e-4, f"step {step}: fp32 relative error {rel(mine32, ref):.1e}"
            hf_err, our_err = rel(half, ref), rel(mine16, ref)
            assert our_err < 1.5 * hf_err + 1e-3, f"step {step}: bf16 error {our_err:.3f}, transformers' {hf_err:.3f}"
            assert rel(mine16, half) < 0.15, f"step {step}: ours vs transformers' bf16 {rel(mine16, half):.3f}"
            tokens = ref[-1:].argmax(-1).cpu()
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
