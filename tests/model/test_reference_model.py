"""The reference model against transformers' Qwen3_5ForCausalLM: logits, cached decode, greedy tokens."""
import copy

import pytest
import torch

from tritonllm_course.config import QWEN35_0_8B, TINY
from tritonllm_course.generation import generate
from tritonllm_course.hf_compat import hf_forward, hf_model, to_dtype, weights_from_hf
from tritonllm_course.model import Qwen35Cache, Qwen35Model
from tritonllm_course.weights import WeightError
from helpers import record_measured, rel


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
    tensors = [t for group in (cache.k, cache.v, cache.conv, cache.state) for t in group.values()]
    assert any(t.abs().sum() > 0 for t in tensors)
    # every tensor a view of one of the two flat buffers, no two overlapping: reset zeroes just those two
    assert {t.untyped_storage().data_ptr() for t in tensors} == {f.untyped_storage().data_ptr() for f in cache.storage}
    spans = sorted((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in tensors)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))
    assert sum(t.numel() for t in tensors) == sum(f.numel() for f in cache.storage)
    cache.reset()
    states = [t for group in (cache.conv, cache.state) for t in group.values()]
    assert all(not t.any() for t in states)
    assert cache.length == 0 and torch.equal(model(prompt[:20], cache), first)
    # reset leaves the K/V rows of the sequence before: a shorter one never reads them (NaN planted there)
    cache.reset()
    for t in (*cache.k.values(), *cache.v.values()):
        t[7:] = float("nan")
    shorter = model(prompt[:7], cache)
    assert torch.equal(shorter, model(prompt[:7], model.new_cache(20)))
    assert torch.isfinite(shorter).all()
    with pytest.raises(ValueError, match="max_position_embeddings"):
        Qwen35Cache.allocate(TINY, TINY.max_position_embeddings + 1)


def test_model_rejects_mis_shaped_weights(pair):
    hf, _ = pair
    weights = weights_from_hf(hf)
    weights["layers.3.self_attn.q_proj.weight"] = weights["layers.3.self_attn.q_proj.weight"][:, :-1]
    with pytest.raises(WeightError, match=r"layers\.3\.self_attn\.q_proj\.weight has shape \[256, 127\]; "
                                          r"the config expects \[256, 128\]"):
        Qwen35Model(TINY, weights)


def _bf16_pair(config, device="cpu"):
    """transformers' model in fp32 and bf16 (cast as `from_pretrained` loads it: see `to_dtype`), and
    ours in fp32 and bf16 on the same weights."""
    hf32 = hf_model(config, dtype=torch.float32, device=device, seed=0, perturb_norms=0.1)
    weights = weights_from_hf(hf32)
    hf16 = to_dtype(copy.deepcopy(hf32), torch.bfloat16)
    return (hf32, Qwen35Model(config, weights), hf16,
            Qwen35Model(config, {k: v.to(torch.bfloat16) for k, v in weights.items()}))


# the real per-head sizes and head counts, 3 DeltaNet layers and 1 attention layer, a small vocabulary
REDUCED = QWEN35_0_8B.replace(num_hidden_layers=4, layer_types=(), vocab_size=4096, bos_token_id=1,
                              eos_token_id=2)


def test_bf16_matches_transformers_bf16():
    """In bf16 the reference model rounds where transformers' torch path rounds (`match_hf_rounding`
    in the operators it calls), so the two agree although both are ~2% from the fp32 logits here (~5%
    at 24 layers): a 128-token prompt, a 16-token continuation after the cache, 4 decode steps. On the
    CPU they run the same torch kernels on the same inputs and agree bit for bit (measured: 0); with
    the rounding of the previous version (the conv's output not rounded before the SiLU, the eager
    attention's bf16 scores, another fp32 order in the delta rule) they were 1.8e-2 apart."""
    _, _, hf16, ours16 = _bf16_pair(REDUCED)
    tokens = torch.randint(0, REDUCED.vocab_size, (148,), generator=torch.Generator().manual_seed(0))
    cache, hf_cache, errors = ours16.new_cache(148), None, []
    for chunk in (tokens[:128], tokens[128:144], *tokens[144:, None]):
        theirs, hf_cache = hf_forward(hf16, chunk, hf_cache)
        errors.append(rel(ours16(chunk, cache, all_logits=True), theirs))
    print("bf16, ours vs transformers: prefill {:.1e}, continuation {:.1e}, decode {}".format(
        errors[0], errors[1], " ".join(f"{e:.1e}" for e in errors[2:])))
    assert max(errors) < 1e-2, errors


@pytest.mark.gpu
def test_full_size_matches_transformers_on_gpu():
    """Real Qwen3.5-0.8B shapes, random weights: a 128-token prefill, then 64 cached decode steps.

    fp32: ours against transformers' to 1e-4. bf16 (the issue's criterion): ours within 1e-2 of
    transformers' bf16 model at every step. At these shapes bf16 rounding alone moves transformers'
    own bf16 logits ~5% from its fp32 run (24 random layers amplify every rounding difference), so this
    holds only because the reference model rounds where transformers rounds (`match_hf_rounding`):
    measured on the CPU at full size, they agree bit for bit. Run with -s for the numbers.
    """
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        hf32, ours32, hf16, ours16 = _bf16_pair(QWEN35_0_8B, device="cuda")
        caches = {"ours32": ours32.new_cache(192), "ours16": ours16.new_cache(192), "hf32": None, "hf16": None}
        tokens = torch.randint(0, QWEN35_0_8B.vocab_size, (128,), generator=torch.Generator().manual_seed(0))
        worst = {}
        try:
            for step in range(65):          # the prefill, then 64 decode steps fed the fp32 argmax
                ref, caches["hf32"] = hf_forward(hf32, tokens, caches["hf32"])
                half, caches["hf16"] = hf_forward(hf16, tokens, caches["hf16"])
                mine32 = ours32(tokens, caches["ours32"], all_logits=True)
                mine16 = ours16(tokens, caches["ours16"], all_logits=True)
                errors = {"fp32 ours vs transformers": rel(mine32, ref),
                          "bf16 ours vs transformers' bf16": rel(mine16, half),
                          "bf16 transformers vs its fp32": rel(half, ref), "bf16 ours vs fp32": rel(mine16, ref)}
                for name, e in errors.items():
                    key = ("prefill" if step == 0 else "decode", name)
                    worst[key] = max(worst.get(key, 0.0), e)
                assert errors["fp32 ours vs transformers"] < 1e-4, f"step {step}: {errors}"
                assert errors["bf16 ours vs transformers' bf16"] < 1e-2, f"step {step}: {errors}"
                tokens = ref[-1:].argmax(-1).cpu()
            # a passing run's numbers, for docs/results.md section 2: the largest relative difference of each
            # comparison over the prefill and over the 64 decode steps
            record_measured("hf_rounding_full_size", {
                "what": "relative difference of the logits, the prefill of 128 tokens and the worst of 64 cached "
                        "decode steps; random weights of Qwen3.5-0.8B's shapes",
                "worst": {phase: {name: e for (p, name), e in worst.items() if p == phase}
                          for phase in ("prefill", "decode")}})
        finally:                            # the numbers, passed or not (pytest shows them with -s or on failure)
            for (phase, name), e in worst.items():
                print(f"{phase:8s} {name:32s} {e:.2e}" + ("  (worst step)" if phase == "decode" else ""))
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
