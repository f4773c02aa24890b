"""fp16 mode: the residual stream in fp32 (Qwen's stream can outgrow fp16's 65,504), in the reference model and
in the engine at every level; bf16 and fp32 keep the model dtype (tests/model/test_reference_model.py,
tests/model/test_engine*.py cover them unchanged).

The weights of `overflowing` make the stream overflow fp16 on purpose: gate_proj = up_proj, so the MLP's
silu(g) * g >= 0, and a few rows of down_proj set large and positive, so every layer adds about +27,000
to those dimensions of the stream. Each sublayer output stays finite in fp16; their sum does not.
"""
import pytest
import torch

from tritonllm_course import reference as R
from tritonllm_course.config import TINY
from tritonllm_course.engine import Engine
from tritonllm_course.generation import generate
from tritonllm_course.hf_compat import hf_model, weights_from_hf
from tritonllm_course.model import Qwen35Model
from tritonllm_course.weights import is_f32_tensor, random_weights
from helpers import rel

PROMPT = [5, 17, 301, 42, 7, 99]
FP16_MAX = torch.finfo(torch.float16).max
LEVELS = (("operators", 512), ("fused", 4), ("fast", 5))   # the fused levels read the prompt in chunks


def _fp16(weights: dict) -> dict:
    """The model's tensors in fp16, the ones the model keeps in fp32 (A_log, ...) as they are."""
    return {n: t if is_f32_tensor(n) else t.half() for n, t in weights.items()}


class PlainFp16Stream(Qwen35Model):
    """The reference model with the residual stream forced to the model dtype: what fp16 mode avoids."""
    residual_dtype = property(lambda self: self.dtype)


@pytest.fixture(scope="module")
def overflowing(rt):
    """(fp16 model, fp32 model on the same fp16-rounded weights) whose stream exceeds 65,504."""
    w = random_weights(TINY, dtype=torch.float32, seed=0)
    big = torch.arange(0, TINY.hidden_size, 8)                                   # 16 of the 128 dims
    for i in range(TINY.num_hidden_layers):
        p = f"layers.{i}.mlp."
        w[p + "up_proj.weight"] = w[p + "gate_proj.weight"].clone()               # act = silu(g) * g >= 0
        w[p + "down_proj.weight"][big] = 4000.0                                   # [16, I] rows: +sum(act) each
    w16 = {n: t.to(rt.device) for n, t in _fp16(w).items()}
    return Qwen35Model(TINY, w16), Qwen35Model(TINY, {n: t.float() for n, t in w16.items()})


def test_residual_dtype():
    for dtype, stream in ((torch.float16, torch.float32), (torch.bfloat16, torch.bfloat16),
                          (torch.float32, torch.float32)):
        model = Qwen35Model.random(TINY, dtype=dtype)
        assert model.residual_dtype == stream
        engine = Engine.from_model(model, max_seq_len=8, default_source="reference", cuda_graph=False)
        assert engine.residual_dtype == stream
        assert engine.decode_act.tensors["x"].dtype == engine.prefill_act.tensors["x"].dtype == stream
        assert engine.decode_act.tensors["h"].dtype == dtype          # what the sublayers read: model dtype


def test_plain_fp16_stream_overflows(overflowing, monkeypatch):
    m16, m32 = overflowing
    peaks, residual_add = [], R.residual_add

    def add(x, residual):
        out = residual_add(x, residual)
        peaks.append((float(x.abs().max()), float(out.abs().max())))
        return out

    monkeypatch.setattr("tritonllm_course.model.qwen35.R.residual_add", add)
    m32(PROMPT)
    assert max(sub for sub, _ in peaks) < FP16_MAX / 2      # every MLP output fits fp16 ...
    assert peaks[-1][1] > FP16_MAX                          # ... the stream they add up to does not
    plain = PlainFp16Stream(TINY, m16.weights)(PROMPT, all_logits=True)
    assert not torch.isfinite(plain).all()


def test_fp32_stream_keeps_fp16_logits_finite_and_accurate(overflowing):
    m16, m32 = overflowing
    got, expected = m16(PROMPT, all_logits=True), m32(PROMPT, all_logits=True)
    assert got.dtype == torch.float16 and torch.isfinite(got).all()
    assert rel(got, expected) < 2e-3


@pytest.mark.parametrize("level,chunk", LEVELS)
def test_engine_fp16_stream_on_overflowing_weights(overflowing, level, chunk):
    m16, m32 = overflowing
    engine = Engine.from_model(m16, max_seq_len=8, level=level, prefill_chunk=chunk, cuda_graph=False)
    logits = engine.prefill(PROMPT)
    assert torch.isfinite(logits).all()
    assert rel(logits, m32(PROMPT)[0]) < 2e-3


@pytest.fixture(scope="module")
def varied(rt):
    """transformers' tiny random weights (std 0.1: a varied greedy path) in fp16, and its greedy tokens."""
    hf = hf_model(TINY, seed=2, perturb_norms=0.3, init_std=0.1)
    model = Qwen35Model(TINY, {n: t.to(rt.device) for n, t in _fp16(weights_from_hf(hf)).items()})
    return model, generate(model, PROMPT, 6, eos_token_id=None)


@pytest.mark.parametrize("level,chunk", LEVELS)
def test_engine_fp16_greedy_matches_reference(varied, level, chunk):
    model, expected = varied
    assert len(set(expected)) > 3                            # a varied path, not one token repeated
    engine = Engine.from_model(model, max_seq_len=16, level=level, prefill_chunk=chunk, cuda_graph=False)
    assert engine.generate(PROMPT, 6, eos_token_id=None) == expected
