"""The gated RMSNorm beyond the generic slot check (against transformers' module, the plain-w
convention, bad input), and chapter 17_deltanet_layer's whole DeltaNet layer assembled from the course's kernels
against transformers' Qwen3_5GatedDeltaNet: a prefill, then decode steps continuing from its cache."""
import inspect

import pytest
import torch
from transformers.models.qwen3_5 import modeling_qwen3_5 as hf

from tritonllm_course import kernels
from tritonllm_course import reference as R
from tritonllm_course.checking import check_fn
from tritonllm_course.runtime import runtime
from tritonllm_course.slots import get
from helpers import randn, rel

RT = runtime()
gated_rms_norm = kernels.get("gated_rmsnorm", "gated_rms_norm", "solutions")
conv = kernels.load("conv1d", "solutions").module
dn = kernels.load("deltanet_gates", "solutions").module


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float16, 2e-3)])
def test_matches_transformers_module(dtype, tol):
    norm = hf.Qwen3_5RMSNormGated(32, eps=1e-6).to(RT.device)
    norm.weight.data = 1 + randn(32, scale=0.1, seed=2)                # fp32, as in the checkpoint
    x, z = randn(5, 4, 32, dtype=dtype), randn(5, 4, 32, dtype=dtype, seed=1)
    y = gated_rms_norm(x, z, norm.weight.data)
    assert y.dtype == dtype
    # transformers multiplies the fp32 weight with x rounded to fp16: one fp16 rounding apart at most
    assert rel(y, norm(x.reshape(-1, 32), z.reshape(-1, 32)).reshape(5, 4, 32)) < tol


def test_z_as_a_column_slice_of_the_merged_projection():
    """z as the engine's prefill passes it: columns of one [T, width] projection output viewed
    [T, HV, D], at an odd offset, and a 2D [T, D] slice: both match the fp64 reference."""
    T, HV, D = 7, 3, 32
    merged = randn(T, HV * D + 45)
    z = merged[:, 13:13 + HV * D].view(T, HV, D)                        # strides (HV * D + 45, D, 1)
    x, w = randn(T, HV, D, seed=1), 1 + randn(D, scale=0.1, seed=2)
    assert not z.is_contiguous()
    assert rel(gated_rms_norm(x, z, w), R.gated_rms_norm(x.double(), z.double(), w.double())) < 1e-6
    with pytest.raises(ValueError, match="z must be contiguous within each token"):
        gated_rms_norm(x, randn(T, D, HV).transpose(1, 2), w)
    z2 = merged[:, 5:5 + D]                                               # 2D: [T, D] rows, strided
    x2 = randn(T, D, seed=3)
    assert rel(gated_rms_norm(x2, z2, w), R.gated_rms_norm(x2.double(), z2.double(), w.double())) < 1e-6


def test_zero_centred_weight_fails_the_check():
    """The DeltaNet norm multiplies by w itself (init 1), not by 1 + w like the other norms of Qwen3.5."""
    slot = get("gated_rmsnorm")

    def one_plus_w(x, z, weight, out, eps=1e-6):
        out.copy_(R.gated_rms_norm(x, z, 1.0 + weight, eps))

    report = check_fn(one_plus_w, slot.reference, slot.make_inputs, slot.make_out, name="1 + w",
                      shape={"T": 3, "HV": 4, "D": 32}, dtype=torch.float32)
    assert not report.passed and report.max_error > 0.5


def test_bad_arguments_are_named():
    x = randn(2, 3, 16)
    with pytest.raises(ValueError, match=r"z has shape \[2, 3, 8\]"):
        gated_rms_norm(x, randn(2, 3, 8), randn(16))
    with pytest.raises(ValueError, match=r"weight has shape \[8\]; expected \[16\]"):
        gated_rms_norm(x, x, randn(8))
    with pytest.raises(TypeError, match="z has dtype float16"):
        gated_rms_norm(x, x.half(), randn(16))


# --- chapter 17_deltanet_layer: the layer from kernels -----------------------------------------------------------
def _cache_kwarg(layer):
    return "cache_params" if "cache_params" in inspect.signature(layer.forward).parameters else "cache"


def kernel_layer(layer, x, cache, decode):
    """Qwen3_5GatedDeltaNet's forward from the course's kernels (the delta rule and the projections
    from their solutions when present, else the references). x [T, hidden]; cache: {"conv", "state"}."""
    def solution(family, name, fallback):
        try:
            return kernels.get(family, name, "solutions")
        except (FileNotFoundError, AttributeError):
            return fallback
    linear = solution("linear", "linear", R.linear)
    rule = solution("delta_rule", "gated_delta_rule_recurrent" if decode else "gated_delta_rule_chunked",
                    R.gated_delta_rule_recurrent if decode else R.gated_delta_rule_chunked)
    H, D = layer.num_k_heads, layer.head_k_dim
    T = x.shape[0]
    w = lambda m: m.weight.detach()                                   # noqa: E731
    qkv, z, b, a = (linear(x, w(p)) for p in (layer.in_proj_qkv, layer.in_proj_z, layer.in_proj_b,
                                               layer.in_proj_a))
    if decode:
        q, k, v, _ = conv.conv1d_l2norm_decode(qkv, w(layer.conv1d)[:, 0], cache["conv"], H, D)
    else:
        q, k, v, cache["conv"] = conv.conv1d_l2norm_prefill(qkv, w(layer.conv1d)[:, 0], None, H, D)
    beta, g = dn.deltanet_gates(b, a, layer.A_log.detach(), layer.dt_bias.detach())
    o, cache["state"] = rule(q, k, v, g, beta, cache.get("state"))     # o [T, HV, D]
    o = gated_rms_norm(o, z.reshape(T, -1, D), w(layer.norm))
    return linear(o.reshape(T, -1), w(layer.out_proj))


def test_deltanet_layer_from_kernels_matches_transformers():
    """Prefill 7 tokens, then 3 decode steps from the cache, against transformers' layer and cache."""
    from transformers import DynamicCache
    config = hf.Qwen3_5TextConfig(**RT.config.to_hf_dict())
    torch.manual_seed(0)
    layer = hf.Qwen3_5GatedDeltaNet(config, layer_idx=0).to(RT.device).eval()
    with torch.no_grad():
        for p in layer.parameters():                                  # N(0, 0.02) would make o ~ 0
            if p.dim() == 2:
                p.mul_(10)
        layer.norm.weight.add_(0.1 * torch.randn_like(layer.norm.weight))
    xs = randn(10, config.hidden_size)
    hf_cache, cache = DynamicCache(config=config), {}
    kw = {_cache_kwarg(layer): hf_cache}                             # `cache` (5.24) or `cache_params` (5.17)
    with torch.no_grad():
        want = [layer(xs[None, :7], **kw)[0]]
        want += [layer(xs[None, t:t + 1], **kw)[0] for t in range(7, 10)]
    got = [kernel_layer(layer, xs[:7], cache, decode=False)]
    got += [kernel_layer(layer, xs[t:t + 1], cache, decode=True) for t in range(7, 10)]
    tol = 1e-5 if RT.interpreted else 2e-3      # on a GPU tl.dot rounds fp32 operands to tf32 (10 bits)
    for t, (g, w) in enumerate(zip(got, want)):
        assert rel(g, w) < tol, f"call {t}: relative error {rel(g, w):.1e}"
    if hasattr(hf_cache, "get_conv_state"):                            # the same state layout as the cache
        assert rel(cache["conv"], hf_cache.get_conv_state(0)[0]) < tol
        assert rel(cache["state"], hf_cache.get_recurrent_state(0)[0]) < tol
