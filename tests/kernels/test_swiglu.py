"""SwiGLU beyond the generic slot check: the merged [gate | up] layout against separate tensors, gates
large enough to overflow a naive formula, the transformers MLP, bad input."""
import pytest
import torch
import torch.nn.functional as F

from tritonllm_course import kernels
from tritonllm_course.runtime import runtime
from helpers import randn, rel

RT = runtime()
swiglu = kernels.get("swiglu", "swiglu", "solutions")
swiglu_merged = kernels.get("swiglu", "swiglu_merged", "solutions")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_merged_layout_equals_separate_halves(dtype):
    gate_up = randn(3, 2 * 150, dtype=dtype)
    gate, up = gate_up.chunk(2, dim=-1)                                # [3, 150] views
    assert torch.equal(swiglu_merged(gate_up), swiglu(gate.contiguous(), up.contiguous()))


def test_gate_and_up_are_not_interchangeable():
    gate, up = randn(2, 64), randn(2, 64, seed=1)
    ref = F.silu(gate) * up
    assert rel(swiglu(gate, up), ref) < 1e-6 and rel(swiglu(up, gate), ref) > 0.1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_large_gates_stay_finite(dtype):
    """silu(g) for |g| up to 60000: exp(-g) overflows fp32 for g < -88, the result must still be ~0, not NaN."""
    gate = torch.tensor([[-60000.0, -1000.0, -100.0, -20.0, 0.0, 20.0, 100.0, 1000.0, 60000.0]],
                        device=RT.device).to(dtype)
    up = torch.ones_like(gate)
    out = swiglu(gate, up)
    assert torch.isfinite(out).all()
    assert rel(out, F.silu(gate.double())) < 1e-3


def test_matches_the_transformers_mlp():
    from transformers.models.qwen3_5 import modeling_qwen3_5 as hf
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
    config = Qwen3_5TextConfig(hidden_size=48, intermediate_size=80, hidden_act="silu")
    mlp = hf.Qwen3_5MLP(config, intermediate_size=80).to(RT.device)
    x = randn(5, 48)
    with torch.no_grad():
        gate_up = torch.cat([mlp.gate_proj(x), mlp.up_proj(x)], dim=-1)  # [5, 160] = [gate | up]
        assert rel(mlp.down_proj(swiglu_merged(gate_up)), mlp(x)) < 1e-6


def test_bad_input_is_named():
    with pytest.raises(ValueError, match=r"last dim must be 2 \* I"):
        swiglu_merged(randn(2, 7))
    with pytest.raises(ValueError, match=r"up has shape \[2, 5\]"):
        swiglu(randn(2, 4), randn(2, 5))
    with pytest.raises(TypeError, match="up has dtype float16"):
        swiglu(randn(2, 4), randn(2, 4, dtype=torch.float16))
    with pytest.raises(ValueError, match="contiguous"):
        swiglu(randn(4, 2).t(), randn(2, 4))
    with pytest.raises(ValueError, match="gate must be 2-D"):
        swiglu(randn(8), randn(8))


@pytest.mark.gpu
def test_bf16_within_one_rounding_of_torch_on_gpu():
    gate_up = randn(128, 2 * 3584, dtype=torch.bfloat16)
    gate, up = gate_up.chunk(2, dim=-1)
    exact = F.silu(gate.double()) * up.double()
    ours, torch_bf16 = swiglu_merged(gate_up), F.silu(gate) * up
    assert rel(ours, exact) <= rel(torch_bf16, exact) * 1.05    # one rounding, not two
