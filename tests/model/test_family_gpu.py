"""Each size of the dense Qwen3.5 family on the GPU, at its real widths: the engine's greedy tokens at every
level under its CUDA graph equal the course's fp32 reference model's and transformers' own, on a cut-down
depth (four layers of the size's pattern: three DeltaNet layers, then attention), random weights (its
initialisation), fp32 with TF32 off. The full-depth sizes run in bf16 in `measure.family`'s benchmark;
on the CPU `tests/model/test_configs.py` runs each size's head structure (`config.miniature`) on every level.
"""
import pytest
import torch

from tritonllm_course.config import FAMILY, get_config, parameter_count
from tritonllm_course.engine import Engine
from tritonllm_course.engine.plan import LEVELS
from tritonllm_course.hf_compat import hf_model, weights_from_hf
from tritonllm_course.model import Qwen35Model

LAYERS = ("linear_attention",) * 3 + ("full_attention",)
PROMPT_LEN, NEW = 40, 12


def cut_down(size: str):
    return get_config(size).replace(num_hidden_layers=len(LAYERS), layer_types=LAYERS)


@pytest.fixture(scope="module")
def sized():
    """size -> (transformers' fp32 model of its cut-down depth, the prompt, transformers' greedy tokens),
    one size at a time (the previous one freed)."""
    held = {}

    def get(size):
        if size not in held:
            held.clear()
            torch.cuda.empty_cache()
            config = cut_down(size)
            hf = hf_model(config, dtype=torch.float32, device="cuda", seed=0, perturb_norms=0.3, init_std=0.05)
            prompt = torch.randint(0, config.vocab_size, (PROMPT_LEN,),
                                   generator=torch.Generator().manual_seed(1)).tolist()
            with torch.no_grad():
                out = hf.generate(torch.tensor([prompt], device="cuda"), max_new_tokens=NEW, do_sample=False,
                                  eos_token_id=None, pad_token_id=0)
            held[size] = config, hf, prompt, out[0, PROMPT_LEN:].tolist()
        return held[size]
    return get


@pytest.fixture(autouse=True)
def no_tf32():
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


# A size whose cut-down fp32 weights pass this runs alone (`pytest -m alone`, the GPU check's `timing` part):
# transformers' model, the reference model and the engine's weights sit on the GPU together (qwen3.5-27b's, 16 GB
# in fp32, ran out of memory beside 11 other workers on an 80 GB H100 on 2026-12-05, qwen3.5-4b's, 4.3 GB, on
# 2026-12-07); the smaller sizes share it.
ALONE_BYTES = 4e9


def _sizes():
    for size in (s for s in FAMILY if s != "qwen3.5-0.8b"):
        wide = 4 * parameter_count(cut_down(size))["total"] > ALONE_BYTES
        yield pytest.param(size, marks=[pytest.mark.alone] if wide else [])


@pytest.mark.gpu
@pytest.mark.parametrize("size", list(_sizes()))
def test_a_size_decodes_the_reference_tokens_at_every_level(sized, size):
    config, hf, prompt, theirs = sized(size)
    weights = weights_from_hf(hf)
    with torch.no_grad():
        ref = Qwen35Model(config, weights)
        cache = ref.new_cache(PROMPT_LEN + NEW)
        logits, ours = ref(prompt, cache), []
        for _ in range(NEW):
            ours.append(int(logits[-1].argmax()))
            logits = ref([ours[-1]], cache)
    assert ours == theirs, f"{size}: the fp32 reference model against transformers"
    assert len(set(theirs)) > 1, f"{size}: one token repeated tests little: {theirs}"
    merged = None
    for level in LEVELS:
        engine = Engine(config, weights, max_seq_len=PROMPT_LEN + NEW + 8, level=level, merged=merged)
        merged = engine.weights
        got = engine.generate(prompt, NEW, eos_token_id=None)
        assert engine.use_graph and got == theirs, f"{size} at level {level}: {got} against {theirs}"
        del engine
