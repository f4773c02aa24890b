"""The 8-bit weight projections beyond the generic slot checks: the quantizers, bad input, per group against
per channel, int8's extremes, zero rows, odd K, the prefill/decode pair, poisoned outputs, fp8's GPU floor."""
import pytest
import torch

from tritonllm_course import kernels
from tritonllm_course import triton_helpers as helpers
from tritonllm_course.reference import quant as Q
from tritonllm_course.runtime import runtime

RT = runtime()
QL = kernels.load("quant", "solutions").module


def _weight(N, K, seed=0):
    g = torch.Generator(device=RT.device).manual_seed(seed)
    return 0.02 * torch.randn(N, K, generator=g, device=RT.device)


def _x(M, K, dtype=torch.float32, seed=1):
    g = torch.Generator(device=RT.device).manual_seed(seed)
    return torch.randn(M, K, generator=g, device=RT.device).to(dtype)


def _rel(out, ref):
    return (torch.linalg.vector_norm(out.double() - ref) / torch.linalg.vector_norm(ref)).item()


def _ref(x, q, scale, group_size=None):
    return Q.quant_linear(x.double(), q.double() if q.dtype != torch.int8 else q, scale.double(), group_size)


def _nan(shape, dtype=torch.float32):
    return torch.full(shape, float("nan"), dtype=dtype, device=RT.device)


# --- the reference quantizers ---------------------------------------------------------------------------------
def test_int8_quantizer_is_symmetric_and_within_half_a_step():
    w = _weight(37, 131)
    q, scale = Q.quantize_int8(w)
    assert q.dtype == torch.int8 and scale.shape == (37,) and scale.dtype == torch.float32
    assert int(q.min()) >= -127 and int(q.max()) <= 127
    assert (q.abs().amax(dim=1) == 127).all()                        # each row's amax lands on the grid's end
    assert ((Q.dequantize(q, scale) - w).abs() <= scale[:, None] / 2 * (1 + 1e-6)).all()
    q_neg, scale_neg = Q.quantize_int8(-w)
    assert torch.equal(q_neg, -q) and torch.equal(scale_neg, scale)  # symmetric: -W quantizes to -q


def test_group_scales_cover_a_partial_last_group():
    w = _weight(5, 70)                                               # groups of 32: 32 + 32 + 6
    w[:, 64:] *= 50                                                  # the partial group holds the large weights
    q, scale = Q.quantize_int8(w, group_size=32)
    assert scale.shape == (5, 3)
    assert (scale[:, 2] > 10 * scale[:, :2].amax(dim=1)).all()      # only that group's step grows
    err_group = (Q.dequantize(q, scale, 32) - w)[:, :64].abs().max()
    q1, s1 = Q.quantize_int8(w)
    err_channel = (Q.dequantize(q1, s1) - w)[:, :64].abs().max()
    assert err_group < err_channel / 10                              # why per group: one large weight costs less


def test_fp8_quantizer_maps_amax_to_448_and_zero_rows_to_scale_1():
    w = _weight(9, 40)
    w[3] = 0
    q, scale = Q.quantize_fp8(w)
    assert q.dtype == torch.float8_e4m3fn and scale[3] == 1 and (q[3].float() == 0).all()
    rows = [r for r in range(9) if r != 3]
    assert torch.allclose(q[rows].float().abs().amax(dim=1), torch.full((8,), 448.0, device=RT.device))
    rel = (Q.dequantize(q, scale) - w).abs() / w.abs().clamp_min(1e-3)
    assert rel[w.abs() > 1e-3].max() <= 2 ** -4 * (1 + 1e-6)        # e4m3: 3 mantissa bits, half a step 2^-4


def test_quantize_refuses_an_unknown_format():
    with pytest.raises(ValueError, match="format must be one of"):
        Q.quantize(_weight(3, 16), "int4")


# --- the kernels ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", Q.FORMATS)
@pytest.mark.parametrize("M,N,K", [(1, 37, 131), (1, 5, 17), (21, 45, 131), (16, 19, 33)])
def test_kernels_match_the_fp64_reference(fmt, M, N, K):
    q, scale, group = Q.quantize(_weight(N, K), fmt, 32)
    x = _x(M, K)
    out = QL.quant_linear(x, q, scale, group, out=_nan((M, N)))
    assert not out.isnan().any()
    assert _rel(out, _ref(x, q, scale, group)) < 1e-5


def test_per_group_and_per_channel_agree_where_the_scales_do():
    """Every group of a row given the row's scale: the per-group kernels compute the per-channel result."""
    q, scale = Q.quantize_int8(_weight(33, 100))
    per_group = scale[:, None].repeat(1, 4).contiguous()             # [33, ceil(100 / 32) = 4]
    for M in (1, 18):
        x = _x(M, 100)
        a = QL.quant_linear(x, q, scale)
        b = QL.quant_linear(x, q, per_group, 32)
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_int8_extremes_keep_their_sign():
    """-128, -1 and 127 loaded as int8 sign-extend (as uint8 they would be 128, 255 and 127)."""
    q = torch.tensor([[-128, -1, 127, 0] * 8, [127, -128, -1, 1] * 8], dtype=torch.int8, device=RT.device)
    scale = torch.tensor([0.5, 2.0], device=RT.device)
    x = _x(1, 32)
    expected = x.double() @ (q.double() * scale.double()[:, None]).T
    assert _rel(QL.quant_gemv(x, q, scale), expected) < 1e-6
    xs = _x(16, 32)
    assert _rel(QL.quant_gemm(xs, q, scale), xs.double() @ (q.double() * scale.double()[:, None]).T) < 1e-6


def test_zero_rows_give_zero_not_nan():
    q, scale = Q.quantize_int8(torch.zeros(7, 40, device=RT.device))
    assert (scale == 1).all()
    for M in (1, 17):
        out = QL.quant_linear(_x(M, 40), q, scale, out=_nan((M, 7)))
        assert (out == 0).all()


def test_prefill_rows_equal_decode_tokens():
    """The GEMM over a prompt gives, row by row, what the GEMV gives for each token alone."""
    for fmt in Q.FORMATS:
        q, scale, group = Q.quantize(_weight(77, 150), fmt, 32)
        x = _x(21, 150)
        prefill = QL.quant_gemm(x, q, scale, group)
        decode = torch.cat([QL.quant_gemv(x[i:i + 1], q, scale, group) for i in range(21)])   # [21, 77]
        torch.testing.assert_close(prefill, decode, rtol=1e-5, atol=1e-6)


def test_fp16_output_of_large_sums():
    """x ~ 100: the raw int8 sums pass fp16's 65504, y does not; the fp32 accumulator keeps y right."""
    q, scale = Q.quantize_int8(_weight(40, 509))
    x = (100 * _x(1, 509)).half()
    out = QL.quant_gemv(x, q, scale)
    assert torch.isfinite(out).all() and _rel(out, _ref(x, q, scale)) < 2e-3


def test_gpu_configs_run_under_the_interpreter():
    """The GPU's GEMV configs at small sizes, whatever the mode: per channel, per group with steps over several
    groups (K > 1024, few rows) and with steps inside one group (K <= 1024)."""
    import triton
    for group, (N, K) in ((None, (1024, 3000)), (32, (1024, 3000)), (32, (5120, 1000))):
        q, scale, _ = Q.quantize(_weight(9, K), "int8" if group is None else "int8_group", group or 128)
        x = _x(1, K)
        cfg = QL.gemv_config(N, K, group)
        assert cfg["BLOCK_N"] * cfg["BLOCK_K"] >= (4096 if K > 1024 else 128)
        y = _nan((1, 9))
        QL.quant_gemv_kernel[(triton.cdiv(9, cfg["BLOCK_N"]),)](x, q, scale, y, 9, K, scale.shape[-1] if group
                                                               else 1, GROUP=group or 0, BLOCK_N=cfg["BLOCK_N"],
                                                               BLOCK_K=cfg["BLOCK_K"])
        assert _rel(y, _ref(x, q, scale, group)) < 1e-5


def test_group_configs_follow_the_probe():
    """Per group (lab/quant_group_probe.py): wide K with few rows keeps the per-channel step over several
    groups; the LM head and K = 1024 step one group at a time on the per-channel rows."""
    assert QL.gemv_config(1024, 3584, 128) == QL.gemv_config(1024, 3584, None) == \
        {"BLOCK_N": 2, "BLOCK_K": 2048, "num_warps": 4}
    assert QL.gemv_config(248320, 1024, 128) == {"BLOCK_N": 16, "BLOCK_K": 128, "num_warps": 2}
    assert QL.gemv_config(8224, 1024, 128) == {"BLOCK_N": 4, "BLOCK_K": 128, "num_warps": 1}


# --- bad input --------------------------------------------------------------------------------------------------
def _ok():
    q, scale = Q.quantize_int8(_weight(8, 64))
    return _x(1, 64), q, scale


@pytest.mark.parametrize("change,error,match", [
    (lambda x, q, s: (x, q.float(), s), TypeError, "weight has dtype float32"),
    (lambda x, q, s: (x, q, s.half()), TypeError, "scale has dtype float16"),
    (lambda x, q, s: (x, q, s[:4]), ValueError, r"scale has shape \[4\]"),
    (lambda x, q, s: (x[:, :32].contiguous(), q, s), ValueError, "last dimension must be K = 64"),
    (lambda x, q, s: (x.long(), q, s), TypeError, "x has dtype int64"),
    (lambda x, q, s: (x, q.t(), s), ValueError, "weight has shape|must be contiguous"),
])
def test_bad_inputs_are_named(change, error, match):
    x, q, s = change(*_ok())
    with pytest.raises(error, match=match):
        QL.quant_gemv(x, q, s)


@pytest.mark.parametrize("group", [0, 24, 100, 8, True, 32.0])
def test_group_size_must_be_a_power_of_two_of_16_or_more(group):
    x, q, _ = _ok()
    with pytest.raises(ValueError, match="group_size must be a power of two"):
        QL.quant_linear(x, q, torch.ones(8, 4, device=RT.device), group)


def test_group_scales_must_match_the_groups():
    x, q, _ = _ok()
    with pytest.raises(ValueError, match=r"scale has shape \[8, 3\]; expected \[8, 2\]"):
        QL.quant_gemm(_x(16, 64), q, torch.ones(8, 3, device=RT.device), 32)
    with pytest.raises(ValueError, match=r"expected \[8\]"):
        QL.quant_gemv(x, q, torch.ones(8, 2, device=RT.device))


def test_fp8_takes_one_scale_per_row():
    q, scale = Q.quantize_fp8(_weight(8, 64))
    with pytest.raises(ValueError, match="per-group scales are for int8"):
        QL.quant_gemv(_x(1, 64), q, torch.ones(8, 2, device=RT.device), 32)


def test_an_out_that_aliases_an_input_is_refused():
    x, q, s = _ok()
    buf = torch.zeros(1, 64, device=RT.device)
    with pytest.raises(ValueError, match="out overlaps x"):
        QL.quant_gemv(buf, q, s, out=buf[:, :8])
    with pytest.raises(ValueError, match="out overlaps scale"):
        QL.quant_gemv(x, q, s, out=s.view(1, 8))
    with pytest.raises(TypeError, match="out has dtype float16"):
        QL.quant_gemv(x, q, s, out=torch.empty(1, 8, dtype=torch.float16, device=RT.device))


def test_gemv_takes_one_token():
    _, q, s = _ok()
    with pytest.raises(ValueError, match="takes one token"):
        QL.quant_gemv(_x(2, 64), q, s)


def test_fp8_is_refused_on_a_gpu_before_sm_89():
    """A T4 (sm_75) has no fp8 conversions: the wrapper says so in one line, before any launch."""
    q, scale = Q.quantize_fp8(_weight(8, 64))
    with helpers.compiling_for(helpers.GPUS[75]):
        with pytest.raises(ValueError, match=r"fp8 e4m3 weights need an sm_89\+ GPU; this one \(T4\) is sm_75"):
            QL.quant_gemv(_x(1, 64), q, scale)



def test_fp8_slots_are_not_run_on_a_gpu_before_sm_89():
    """On a T4 the fp8 slots are reported "not run", naming the capability, rather than failed: the check a
    learner runs there, and tests/kernels/test_slots.py, skip them; the interpreter runs them anywhere."""
    from types import SimpleNamespace

    from tritonllm_course import slots
    from tritonllm_course.checking import check

    t4 = SimpleNamespace(interpreted=False, capability=(7, 5))
    h200 = SimpleNamespace(interpreted=False, capability=(9, 0))
    for name in ("quant_gemv.fp8", "quant_gemm.fp8"):
        slot = slots.get(name)
        assert slot.not_here(t4) == f"{name} needs sm_89 or newer ({slot.title}); this GPU is sm_75"
        assert slot.not_here(h200) is None
    assert slots.get("quant_gemv").not_here(t4) is None
    assert slots.get("quant_gemv.fp8").not_here(SimpleNamespace(interpreted=True, capability=None)) is None
    if not helpers.gpu_launch(torch.empty(0).device):   # under the interpreter the check runs fp8 in full
        assert check("quant_gemv.fp8", "solutions", verbose=False).passed

# --- the accuracy measurement -----------------------------------------------------------------------------------
def test_accuracy_quantizes_every_linear_weight_and_only_those():
    from tritonllm_course.config import PRESETS
    from tritonllm_course.measure import quant_accuracy as A
    from tritonllm_course.weights import random_weights
    config = PRESETS["tiny"]
    weights = random_weights(config, dtype=torch.bfloat16)
    quantized, count, stored = A.fake_quantized(weights, "int8")
    linear = [n for n in weights if A.is_linear(n)]
    assert count == len(linear) and stored > 0
    assert {n for n in weights if not torch.equal(weights[n], quantized[n])} <= set(linear)
    assert all(n.endswith(("proj.weight", "in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight",
                           "in_proj_a.weight")) for n in linear)
    assert not any(A.is_linear(n) for n in ("embed_tokens.weight", "norm.weight", "layers.0.linear_attn.conv1d.weight"))


def test_accuracy_metrics_of_equal_and_of_different_logits():
    from tritonllm_course.measure.quant_accuracy import compare
    logits = torch.randn(5, 50, generator=torch.Generator().manual_seed(0))
    same = compare(logits, logits.clone())
    assert same["kl_mean"] == 0 and same["top1_agreement_pct"] == 100 and same["positions"] == 5
    other = compare(logits, -logits)
    assert other["kl_max"] >= other["kl_mean"] > 0 and other["top1_agreement_pct"] == 0


def test_accuracy_run_on_the_small_checkpoint():
    """The transformers-written checkpoint, 8 positions: every format close to bf16, int8 closer than fp8."""
    from tritonllm_course.measure.quant_accuracy import run
    record = run(length=8, full=False)
    rows = record["models"]["tiny_checkpoint"]["formats"]
    assert set(rows) == set(Q.FORMATS) and record["device"] == "cpu"
    assert all(0 <= r["kl_mean"] <= r["kl_max"] < 0.5 for r in rows.values())
    assert rows["int8"]["kl_mean"] < rows["fp8"]["kl_mean"]


_COMPILE = r'''
import sys, torch
from triton.backends.compiler import GPUTarget
from triton.compiler import make_backend
from tritonllm_course import kernels
from tritonllm_course.targets import Kernel, _compile, _expand, _problems, _recording
from tritonllm_course.triton_helpers import GPUS
QL = kernels.load("quant", "solutions").module
found = []
for arch, dtype_name in ((75, "float16"), (89, "bfloat16"), (90, "bfloat16")):
    gpu, target = GPUS[arch], GPUTarget("cuda", arch, 32)
    dtype = getattr(torch, dtype_name)
    formats = [(torch.int8, None), (torch.int8, 128)] + ([(torch.float8_e4m3fn, None)] if arch >= 89 else [])
    with _recording(gpu, dtype_name) as launches:
        for wdt, group in formats:
            for N, K in ((248320, 1024), (1024, 3584)):
                w = torch.empty(N, K, dtype=wdt, device="meta")
                s = torch.empty((N,) if group is None else (N, -(-K // group)), device="meta")
                QL.quant_gemv(torch.empty(1, K, dtype=dtype, device="meta"), w, s, group)
                for M in (128, 512):
                    QL.quant_gemm(torch.empty(M, K, dtype=dtype, device="meta"), w, s, group)
        typed = _expand(launches, make_backend(target), "quant")
    for launch in typed:
        res, o = _compile(launch, target), launch["options"]
        k = Kernel(launch["fn"].__name__, arch, dtype_name, [], {}, o.num_warps, o.num_stages, launch["pdl"],
                   res["shared_bytes"], res["registers"], res["local_bytes"])
        found += [f"sm_{arch} {k.name}: {p}" for p in _problems(k, gpu, res["error"])]
print("\n".join(found) or "all fit")
sys.exit(1 if found else 0)
'''


def test_kernels_compile_within_every_gpus_limits():
    """The GEMV and GEMM at the LM head's and the down projection's shapes, int8 (both scales) on a T4 in fp16,
    and fp8 too on sm_89 and sm_90 in bf16, compiled without a GPU (`tritonllm_course.targets`' machinery):
    each compiles, and its shared memory and registers fit."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", _COMPILE], env=env, cwd=root, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
