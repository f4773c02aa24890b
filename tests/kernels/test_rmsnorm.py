"""The zero-centred RMSNorm kernel beyond the generic slot check: against transformers' module, fp32
statistics where fp16 would overflow, the (1 + w) convention, strided q heads, bad input."""
import pytest
import torch
from transformers.models.qwen3_5 import modeling_qwen3_5 as hf

from tritonllm_course import kernels
from tritonllm_course.runtime import runtime
from helpers import randn, rel

RT = runtime()
rms_norm = kernels.get("rmsnorm", "rms_norm", "solutions")
qk_norm = kernels.get("rmsnorm", "qk_norm", "solutions")


def hf_norm(weight):
    norm = hf.Qwen3_5RMSNorm(weight.shape[0], eps=1e-6).to(RT.device)
    norm.weight.data.copy_(weight)
    return norm


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float16, 1e-3)])
def test_matches_transformers_module(dtype, tol):
    x, w = randn(6, 96, dtype=dtype), randn(96, scale=0.3, seed=1)
    assert rel(rms_norm(x, w.to(dtype)), hf_norm(w.to(dtype).float())(x)) < tol


def test_fp32_statistics_survive_activations_that_overflow_fp16():
    """Qwen's residual stream has channels in the hundreds: their squares overflow fp16 (max 65504)."""
    x = randn(3, 100, scale=4.0)
    x[:, 7] = 600.0                                   # one massive channel, as in real checkpoints
    x = x.half()
    assert torch.isinf((x * x).sum(-1)).all()         # the naive fp16 statistic is inf
    w = randn(100, scale=0.1, seed=1).half()
    y = rms_norm(x, w)
    assert torch.isfinite(y).all() and rel(y, hf_norm(w.float())(x)) < 1e-3


def test_zero_weight_means_unit_scale():
    """Weights are offsets from 1: w = 0 must give x / rms(x), not 0 (the plain-w convention)."""
    x = randn(4, 50)
    y = rms_norm(x, torch.zeros(50, device=RT.device))
    assert rel(y, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)) < 1e-6


def test_strided_query_heads_read_in_place():
    """q is a view into q_proj's output ([query | gate] per head): the same result as a packed copy."""
    qg, w = randn(5, 3, 2 * 40), randn(40, scale=0.1, seed=1)
    q = qg[..., :40]                                  # [5, 3, 40], strides (240, 80, 1)
    y = qk_norm(q, w)
    # (not bit-equal on a GPU: other strides compile to another layout, summing in another order)
    assert y.is_contiguous() and rel(y, qk_norm(q.contiguous(), w)) < 1e-6
    assert rel(y, hf_norm(w)(q)) < 1e-6


def test_decode_rows_equal_prefill_rows_and_any_leading_shape():
    x, w = randn(7, 33), randn(33, scale=0.1, seed=1)
    batch = rms_norm(x, w)
    assert all(rel(rms_norm(x[t:t + 1], w), batch[t:t + 1]) < 1e-6 for t in range(7))
    assert rel(rms_norm(x[2], w), batch[2]) < 1e-6                                      # 1-D
    assert rel(rms_norm(x[:6].reshape(2, 3, 1, 33), w).reshape(6, 33), batch[:6]) < 1e-6  # 4-D


def test_bad_arguments_are_named():
    x = randn(4, 3, 16)
    with pytest.raises(ValueError, match=r"weight has shape \[15\]; expected \[16\]"):
        rms_norm(x, randn(15))
    with pytest.raises(ValueError, match="last dim of stride 1"):
        rms_norm(randn(16, 4).t(), randn(4))
    with pytest.raises(ValueError, match=r"x must be \[T, heads, head_dim\]"):
        qk_norm(x[0], randn(16))
    with pytest.raises(ValueError, match="eps must be positive"):
        rms_norm(x, randn(16), eps=0.0)
    with pytest.raises(ValueError, match="supports 1 to"):
        rms_norm(randn(1, 40000), randn(40000))
    with pytest.raises(ValueError, match=r"out has shape \[4, 16\]"):
        rms_norm(x, randn(16), out=torch.empty(4, 16, device=RT.device))


@pytest.mark.gpu
@pytest.mark.parametrize("T", [1, 128])
def test_bf16_real_shapes_match_transformers(T):
    x, w = randn(T, 1024, dtype=torch.bfloat16, scale=3.0), randn(1024, scale=0.3, seed=1)
    assert rel(rms_norm(x, w.bfloat16()), hf_norm(w.bfloat16().float())(x)) < 4e-3
    q = randn(T, 8, 512, dtype=torch.bfloat16)[..., :256]
    wq = randn(256, scale=0.3, seed=2).bfloat16()
    assert rel(qk_norm(q, wq), hf_norm(wq.float())(q)) < 4e-3
