"""The DeltaNet gates and L2 norm beyond the generic slot check: against transformers' own code,
softplus at large inputs in fp16, more value heads than key heads, the wrong-axis bug, bad input."""
import pytest
import torch
import torch.nn.functional as F
from transformers.models.qwen3_5 import modeling_qwen3_5 as hf

from tritonllm_course import kernels
from tritonllm_course.checking import check_fn
from tritonllm_course.runtime import runtime
from tritonllm_course.slots import get
from helpers import randn, rel

RT = runtime()
gates = kernels.get("deltanet_gates", "deltanet_gates", "solutions")
l2norm_qk = kernels.get("deltanet_gates", "l2norm_qk", "solutions")


def hf_gates(b, a, A_log, dt_bias):
    """The two lines of Qwen3_5GatedDeltaNet.forward, with its parameters."""
    beta = b.sigmoid()
    g = -A_log.float().exp() * F.softplus(a.float() + dt_bias)
    return beta, g


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float16, 1e-3)])
def test_gates_match_transformers_layer_parameters(dtype, tol):
    """A_log and dt_bias as transformers initialises them (A_log = log U(0.01, 16), dt_bias = 1)."""
    layer = hf.Qwen3_5GatedDeltaNet(hf.Qwen3_5TextConfig(**RT.config.to_hf_dict()), layer_idx=0)
    HV = layer.num_v_heads                              # 4 value heads for 2 key heads in the tiny config
    A_log, dt_bias = layer.A_log.detach().to(RT.device), layer.dt_bias.detach().to(RT.device)
    b, a = randn(9, HV, dtype=dtype, scale=2.0), randn(9, HV, dtype=dtype, scale=4.0, seed=1)
    beta, g = gates(b, a, A_log, dt_bias.to(dtype))
    beta_hf, g_hf = hf_gates(b, a, A_log, dt_bias.to(dtype))
    assert beta.dtype == dtype and g.dtype == torch.float32
    assert rel(beta, beta_hf) < tol and rel(g, g_hf) < 1e-6


def test_gates_read_column_slices_of_the_merged_projection():
    """b and a as the engine's prefill passes them: column slices of one [T, width] projection output,
    odd widths and offsets; the outputs are contiguous and equal those of contiguous copies."""
    T, HV = 11, 5
    merged = randn(T, 3 * HV + 7, scale=3.0)                           # [.. | b | a | ..] per token
    b, a = merged[:, 4:4 + HV], merged[:, 4 + HV + 2:4 + 2 * HV + 2]
    assert not b.is_contiguous() and b.stride() == (3 * HV + 7, 1)
    A_log, dt_bias = randn(HV, seed=2), randn(HV, seed=3)
    beta, g = gates(b, a, A_log, dt_bias)
    beta_ref, g_ref = hf_gates(b, a, A_log, dt_bias)
    assert beta.is_contiguous() and rel(beta, beta_ref) < 1e-6 and rel(g, g_ref) < 1e-6
    with pytest.raises(ValueError, match="b must be contiguous within each token"):
        gates(merged[:, :2 * HV:2], a, A_log, dt_bias)


def test_softplus_is_safe_for_large_inputs_in_fp16():
    """exp(a) overflows fp16 from a = 11.1 and fp32 from a = 88.7: the kernel must stay finite and exact."""
    a = torch.tensor([[-80.0, -20.0, 0.0, 11.5, 25.0, 90.0, 1000.0]], device=RT.device)
    b = torch.zeros_like(a)
    A_log, dt_bias = torch.zeros(7, device=RT.device), torch.zeros(7, device=RT.device)
    assert torch.isinf(torch.log(1 + torch.exp(a.half()))).any()      # the naive formula in fp16
    for dtype in (torch.float16, torch.float32):
        _, g = gates(b.to(dtype), a.to(dtype), A_log, dt_bias)
        assert torch.isfinite(g).all()
        assert rel(g, -F.softplus(a.to(dtype).double())) < 1e-6


def test_l2norm_matches_transformers_on_views_of_the_conv_output():
    T, H, HV, D = 4, 2, 4, 32
    conv_out = randn(T, (2 * H + HV) * D)
    q = conv_out[:, :H * D].view(T, H, D)                              # strides (256, 32, 1)
    k = conv_out[:, H * D:2 * H * D].view(T, H, D)
    q_n, k_n = l2norm_qk(q, k)
    assert q_n.is_contiguous() and k_n.is_contiguous()
    assert rel(q_n, hf.l2norm(q) * D ** -0.5) < 1e-6 and rel(k_n, hf.l2norm(k)) < 1e-6
    assert torch.allclose(k_n.norm(dim=-1), torch.ones(T, H, device=RT.device), atol=1e-5)


def test_l2norm_in_fp16_and_for_a_zero_row():
    q, k = randn(3, 2, 40, dtype=torch.float16), randn(3, 2, 40, dtype=torch.float16, seed=1)
    k[1, 0] = 0                                                         # eps keeps 0 / 0 away: stays 0
    q_n, k_n = l2norm_qk(q, k)
    assert q_n.dtype == torch.float16 and (k_n[1, 0] == 0).all()
    assert rel(q_n, hf.l2norm(q.float()) * 40 ** -0.5) < 1e-3 and rel(k_n, hf.l2norm(k.float())) < 1e-3


def test_normalising_the_wrong_axis_fails_the_check():
    """Normalising over the heads (dim 1) instead of within each head: unit vectors, wrong ones."""
    slot = get("l2norm_qk")

    def wrong_axis(q, k, q_out, k_out, eps=1e-6):
        q_out.copy_(hf.l2norm(q, dim=1) * q.shape[-1] ** -0.5)
        k_out.copy_(hf.l2norm(k, dim=1))

    report = check_fn(wrong_axis, slot.reference, slot.make_inputs, slot.make_out, name="wrong axis",
                      shape={"T": 3, "H": 2, "HV": 4, "D": 24, "view": 1}, dtype=torch.float32)
    assert not report.passed and report.max_error > 0.1


def test_bad_arguments_are_named():
    b = randn(3, 4)
    with pytest.raises(ValueError, match=r"A_log has shape \[3\]; expected \[4\]"):
        gates(b, b, randn(3), randn(4))
    with pytest.raises(TypeError, match="a has dtype float16"):
        gates(b, b.half(), randn(4), randn(4))
    q = randn(3, 2, 8)
    with pytest.raises(ValueError, match=r"k has shape \[3, 2, 4\]"):
        l2norm_qk(q, randn(3, 2, 4))
    with pytest.raises(ValueError, match="contiguous last dim"):
        l2norm_qk(randn(3, 8, 2).transpose(1, 2), randn(3, 2, 8))
    with pytest.raises(ValueError, match="eps must be positive"):
        l2norm_qk(q, q, eps=0.0)
