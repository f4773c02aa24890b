"""Chapter 28_compilers's GEMM with a fused GELU epilogue beyond the generic slot checks: bad input, both GELU forms
against PyTorch's, large |x| where tanh saturates, empty shapes, K not a multiple of the block, the GEMV and
the GEMM on one token, the GPU configs compiled for sm_90, and the measurement's plumbing on the CPU."""
import pytest
import torch
import torch.nn.functional as F

from helpers import randn, rel
from tritonllm_course import kernels
from tritonllm_course import reference as R
from tritonllm_course.runtime import runtime

RT = runtime()
GE = kernels.load("gemm_epilogue", "solutions").module


def _pair(M, N, K, dtype=torch.float32, seed=0):
    return randn(M, K, dtype=dtype, seed=seed), randn(N, K, dtype=dtype, scale=K ** -0.5, seed=seed + 1)


def test_bad_input_is_named_before_any_launch():
    x, w = _pair(3, 5, 16)
    with pytest.raises(ValueError, match="approximate must be 'none'"):
        GE.gelu_linear(x, w, "exact")
    with pytest.raises(ValueError, match="approximate must be one of"):
        R.gelu_linear(x.double(), w.double(), "erf")
    with pytest.raises(ValueError, match="act must be one of"):
        GE.linear_act(x, w, "relu")
    with pytest.raises(ValueError, match=r"x must be \[M, K\]"):
        GE.gelu_linear(x[None], w)
    with pytest.raises(TypeError, match="x has dtype float16"):
        GE.gelu_linear(x.half(), w)
    with pytest.raises(ValueError, match="last dimension must be K = 16"):
        GE.gelu_linear(randn(3, 15), w)
    with pytest.raises(ValueError, match="contiguous"):
        GE.gelu_linear(randn(16, 3).t(), w)
    with pytest.raises(ValueError, match=r"out has shape \[3, 4\]"):
        GE.gelu_linear(x, w, out=torch.empty(3, 4, device=RT.device))
    with pytest.raises(ValueError, match="config must give BLOCK_M"):
        GE.linear_act(x, w, config={"BLOCK_N": 16})
    with pytest.raises(ValueError, match="approximate must be 'none'"):
        GE.gelu(x, "fast")


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")   # the interpreter's numpy: e^-2u
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_elementwise_gelu_matches_pytorch_over_a_wide_range(approximate, dtype):
    """From -60 to 60: tanh saturates from |u| ~ 10 on, e^2u overflows fp32 past u ~ 44 (x ~ 10); every value
    finite, and within the dtype's rounding of PyTorch's fp64 GELU."""
    x = torch.linspace(-60, 60, 2001, device=RT.device).to(dtype)
    y = GE.gelu(x, approximate)
    assert torch.isfinite(y).all()
    assert rel(y, F.gelu(x.double(), approximate=approximate)) < (1e-6 if dtype == torch.float32 else 1e-3)
    big = torch.tensor([-3e4, -1e3, -30.0, 30.0, 1e3, 3e4], device=RT.device).to(dtype)
    assert torch.equal(GE.gelu(big, approximate).float(), torch.where(big > 0, big, 0.0).float())


def test_the_tanh_form_is_within_its_known_distance_of_the_exact_gelu():
    """The approximation itself (fp64): at most 4.8e-4 from x * Phi(x) anywhere, 0 far out."""
    x = torch.linspace(-10, 10, 200001, dtype=torch.float64)
    gap = (F.gelu(x, approximate="tanh") - F.gelu(x)).abs()
    assert 4e-4 < gap.max().item() < 4.8e-4 and gap[x.abs() > 8].max().item() < 1e-12


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")   # the interpreter's numpy: e^-2u
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_large_pre_activations_stay_finite_in_the_epilogue(approximate):
    x, w = _pair(19, 40, 70)
    w = w * 40                                                   # pre-activations ~ N(0, 40^2)
    y = GE.gelu_linear(x, w, approximate)
    assert torch.isfinite(y).all()
    assert rel(y, R.gelu_linear(x.double(), w.double(), approximate)) < 1e-6


@pytest.mark.parametrize("M,N,K", [(0, 7, 16), (5, 0, 16), (0, 0, 3)], ids=["no rows", "no columns", "nothing"])
def test_empty_shapes(M, N, K):
    x, w = randn(M, K), randn(N, K)
    out = GE.gelu_linear(x, w)
    assert out.shape == (M, N)


@pytest.mark.parametrize("K", [1, 15, 65, 131, 200])
@pytest.mark.parametrize("M", [1, 3, 70])
def test_k_not_a_multiple_of_the_block(M, K):
    """K below tl.dot's 16, past one 64-wide step by 1, and by 3; one token (the GEMV) and several."""
    x, w = _pair(M, 33, K)
    for approximate in ("none", "tanh"):
        assert rel(GE.gelu_linear(x, w, approximate), R.gelu_linear(x.double(), w.double(), approximate)) < 1e-6


def test_the_gemv_and_the_gemm_agree_on_one_token():
    """M = 1 takes the GEMV; a config forces the GEMM (the article's 128 x 128 x 32 tiles, 127 rows of padding)."""
    x, w = _pair(1, 150, 300)
    gemv = GE.linear_act(x, w, "gelu_tanh")
    gemm = GE.linear_act(x, w, "gelu_tanh", config={"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32})
    torch.testing.assert_close(gemm, gemv, rtol=1e-5, atol=1e-6)


def test_no_activation_is_the_projection():
    x, w = _pair(37, 61, 90)
    assert rel(GE.linear_act(x, w, "linear"), R.linear(x.double(), w.double())) < 1e-6


def test_gpu_configs_are_tensor_core_tiles_that_fit(monkeypatch):
    """Chapter 05_projections's configs (linear.gemm_config, gemv_config), which gemm_epilogue takes."""
    monkeypatch.setattr(kernels.load("linear").module, "_shared_memory", lambda device: 64 * 1024)   # a T4's 64 KB
    for M, N, K in [(2, 3584, 1024), (128, 3584, 1024), (128, 4096, 8192), (512, 1024, 3584)]:
        cfg = GE.gemm_gelu_config(M, N, K, torch.bfloat16, torch.device("cuda", 0))
        assert min(cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]) >= 16 and cfg["num_stages"] >= 1
        assert cfg["num_stages"] * (cfg["BLOCK_M"] + cfg["BLOCK_N"]) * cfg["BLOCK_K"] * 2 <= 64 * 1024
    for N, K, warps in [(3584, 1024, 4), (32768, 128, 1), (4096, 8192, 8)]:
        cfg = GE.gemv_gelu_config(N, K)
        assert cfg["BLOCK_N"] == 2 and cfg["num_warps"] == warps


def test_every_gpu_config_compiles_for_sm90():
    """The launches the GPU makes at the real shapes, lowered for an H200 here (bf16, wgmma tiles)."""
    from tritonllm_course import lowering
    sig = {"x_ptr": "*bf16", "w_ptr": "*bf16", "y_ptr": "*bf16", "M": 128, "N": 3584, "K": 1024}
    tiles = [{"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 128, "num_warps": 4, "num_stages": 5},
             {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 8, "num_stages": 4},
             {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "num_warps": 4, "num_stages": 3}]
    requests = [dict(kernel=GE.gemm_gelu_kernel, signature=sig, num_warps=t["num_warps"], num_stages=t["num_stages"],
                     constexprs={"ACT": act, **{k: v for k, v in t.items() if k.startswith("BLOCK")}})
                for t, act in zip(tiles, (1, 2, 2))]
    gemv = GE.gemv_gelu_config(3584, 1024)
    gemv_sig = {k: sig[k] for k in ("x_ptr", "w_ptr", "y_ptr", "N", "K")}
    requests.append(dict(kernel=GE.gemv_gelu_kernel, signature=gemv_sig,
                         constexprs={"ACT": 1, "BLOCK_N": gemv["BLOCK_N"], "BLOCK_K": gemv["BLOCK_K"]},
                         num_warps=gemv["num_warps"]))
    requests.append(dict(kernel=GE.gelu_kernel, signature={"x_ptr": "*bf16", "y_ptr": "*bf16", "n": 1 << 20},
                         constexprs={"ACT": 2, "BLOCK": 1024}))
    lowered = lowering.lower_many(requests)
    for low in lowered[:3]:
        assert low.count("ptx", r"wgmma\.mma_async") > 0 and low.resources["LOCAL"] == 0, low
    assert all(low.resources["REG"] <= 255 for low in lowered)


def test_bench_plumbing_runs_on_the_cpu(monkeypatch, tmp_path):
    """Every measurement of compiler_bench at tiny shapes, with a stand-in timer and without torch.compile:
    the arguments reach the kernels, and the markdown and the plot are written from what comes back."""
    import matplotlib
    matplotlib.use("Agg")
    from tritonllm_course.measure import compiler_bench as B
    monkeypatch.setattr(B, "DEVICE", RT.device)
    monkeypatch.setattr(B, "time_calls", lambda fn, sets: (fn(**sets[0]), 1.0)[1])
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)
    linear = kernels.load("linear", "solutions").module
    res = {"gpu": "cpu", "date": "today", "summary": RT.summary(),
           "epilogue": [B.epilogue(GE, "tiny", 1, 40, 24), B.epilogue(GE, "tiny", 20, 40, 24)],
           "elementwise": [B.elementwise(GE, 3, 50)], "sweep": B.sweep(linear, ms=(1, 17), nks=[(40, 24)]),
           "peak": {"M": 8, "N": 8, "K": 8, "datasheet_dense_tflops": 1.0, "cuBLAS": {"us": 1.0, "tflops": 1.0}},
           "inductor": {"dir": "inductor_cpu_today", "files": {"x.py": {"generated": ["k"], "launched": ["k"],
                                                                          "extern": ["mm"], "compile_s": 1.0}}}}
    assert res["sweep"]["share_within"] == 1.0 and len(res["sweep"]["points"]) == 2
    text = B.markdown(res)
    assert "| tiny 20 x 24 -> 40 | tanh |" in text and "100% of 2 shapes within 5%" in text
    B.plot(res).savefig(tmp_path / "plot.png")


def test_inductor_plumbing_writes_its_files(monkeypatch, tmp_path):
    """compiler_bench's Inductor part with a stand-in for the compile (a canned module) and the timer: the
    files are written, their kernels read, and a failing max-autotune compile is recorded, not raised."""
    import time
    from tritonllm_course.measure import compiler_bench as B
    canned = ("triton_per_fused_0 = async_compile.triton('triton_per_fused_0', '...')\n"
              "def call(self, args):\n    triton_per_fused_0.run(a, stream=s)\n    extern_kernels.mm(a, b, out=c)\n")

    def fake_generated(fn, *args, mode=None):
        if mode is not None:
            raise RuntimeError("no Triton template here")
        return canned, 0.5
    monkeypatch.setattr(B, "DEVICE", RT.device)
    monkeypatch.setattr(B, "generated", fake_generated)
    monkeypatch.setattr(B, "_sets", lambda make, moved: [make(0)])
    monkeypatch.setattr(B, "time_calls", lambda fn, sets: (fn(**sets[0]), 1.0)[1])
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)
    res = B.inductor(tmp_path / "inductor_cpu_today", deadline=time.perf_counter() + 600, dtype=torch.float32)
    assert sorted(p.name for p in (tmp_path / "inductor_cpu_today").iterdir()) == [
        "gelu_linear_M128.py", "layer_tail_T1.py", "layer_tail_T128.py"]
    assert res["files"]["layer_tail_T1.py"]["launched"] == ["triton_per_fused_0"]
    assert res["files"]["layer_tail_T128.py"]["extern"] == ["mm"] and "eager_us" in res["files"]["layer_tail_T1.py"]
    assert res["skipped"].startswith("max-autotune failed: RuntimeError")
    late = B.inductor(tmp_path / "late", deadline=0.0, dtype=torch.float32)
    assert "took the time budget" in late["skipped"]


def test_the_measurement_needs_a_gpu(tmp_path, capsys):
    if RT.on_gpu:
        pytest.skip("on a GPU this is the measurement itself: scripts/gpu_check.sh runs it")
    from tritonllm_course.measure import compiler_bench as B
    assert B.main(["--out", str(tmp_path)]) == 1 and "needs a GPU" in capsys.readouterr().out
    assert not list(tmp_path.iterdir())


def test_layer_tail_is_the_models_layer_end():
    """`layer_tail` (what Inductor compiles in chapter 28_compilers) computes the reference model's output gate,
    o_proj, residual + ln2, MLP and residual, at small widths."""
    from tritonllm_course.measure.compiler_bench import layer_tail, layer_tail_inputs
    args = layer_tail_inputs(3, hidden=32, heads=2, head_dim=16, intermediate=48, dtype=torch.float64,
                             device=RT.device)
    qg, o, x, wo, ln2, wg, wu, wd = args
    gate = qg.view(3, 2, 32)[..., 16:].reshape(3, 32)                        # [T, heads * head_dim]
    h = x + (o * torch.sigmoid(gate)) @ wo.T
    n = h / torch.sqrt((h * h).mean(-1, keepdim=True) + 1e-6) * (1 + ln2)
    expected = h + (F.silu(n @ wg.T) * (n @ wu.T)) @ wd.T
    assert rel(layer_tail(*args, head_dim=16), expected) < 1e-12


def test_kernels_in_reads_an_inductor_module():
    from tritonllm_course.measure.compiler_bench import kernels_in
    code = ("triton_poi_fused_a_0 = async_compile.triton('triton_poi_fused_a_0', '''...''')\n"
            "triton_red_fused_b_1 = async_compile.triton('triton_red_fused_b_1', '''...''')\n"
            "def call(self, args):\n        triton_red_fused_b_1.run(buf0, stream=s)\n"
            "        extern_kernels.mm(buf0, arg1, out=buf1)\n        triton_poi_fused_a_0.run(buf1, stream=s)\n")
    found = kernels_in(code)
    assert found == {"generated": ["triton_poi_fused_a_0", "triton_red_fused_b_1"],
                     "launched": ["triton_red_fused_b_1", "triton_poi_fused_a_0"], "extern": ["mm"]}


@pytest.mark.gpu
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gpu_fused_is_as_close_as_the_unfused_pair_in_bf16(approximate):
    """At the real shapes in bf16 the fused kernel rounds once, the pair twice: the fused one is no further
    from fp64 than cuBLAS + F.gelu (to a margin), and so are the article's tiles at one token."""
    for M in (1, 128):
        x, w = _pair(M, 3584, 1024, torch.bfloat16)
        ref = R.gelu_linear(x.double(), w.double(), approximate)
        unfused = rel(F.gelu(F.linear(x, w), approximate=approximate), ref)
        assert rel(GE.gelu_linear(x, w, approximate), ref) <= 1.05 * unfused + 1e-4
        article = GE.linear_act(x, w, GE.APPROXIMATE[approximate], config={"BLOCK_M": 128, "BLOCK_N": 128,
                                                                              "BLOCK_K": 32})
        assert rel(article, ref) <= 1.05 * unfused + 1e-4
