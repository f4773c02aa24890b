"""Chapter 21_norm_fusion's fused kernels beyond the generic slot checks: each equals the unfused sequence of the
course's own kernels, the norm statistic covers the whole row, the GPU launch configurations, an fp32 residual
stream, transformers' modules, bad input; on a GPU, CUDA-graph capture and the launch saved."""
import pytest
import torch
import triton

from tritonllm_course import kernels
from tritonllm_course import reference as R
from tritonllm_course.checking import check_fn
from tritonllm_course.runtime import runtime
from tritonllm_course.slots import get as get_slot

from helpers import randn, rel

RT = runtime()
FUSION = kernels.load("norm_fusion", "solutions").module
rms_norm = kernels.get("rmsnorm", "rms_norm", "solutions")
residual_add = kernels.get("residual", "residual_add", "solutions")
linear = kernels.get("linear", "linear", "solutions")
swiglu_merged = kernels.get("swiglu", "swiglu_merged", "solutions")


def _weights(N, K, dtype=torch.float32, seed=1):
    return randn(N, K, dtype=dtype, scale=0.02, seed=seed)


def _norm_weight(K, dtype=torch.float32, seed=2):
    return randn(K, dtype=dtype, scale=0.1, seed=seed)


# residual + RMSNorm -----------------------------------------------------------------------------------
# fp16: 1e-4 is well under one rounding of the output (~3e-4): a norm of the unrounded sum fails
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float16, 1e-4)])
def test_residual_norm_equals_the_unfused_pair(dtype, tol):
    x, r, w = randn(5, 300, dtype=dtype), randn(5, 300, dtype=dtype, seed=1), _norm_weight(300, dtype)
    h, normed = FUSION.residual_rms_norm(x, r, w)
    h_ref = residual_add(x, r)
    assert torch.equal(h, h_ref)                           # one fp32 add, one rounding: the same bits
    assert rel(normed, rms_norm(h_ref, w)) < tol           # the norm of the stream as stored


def test_residual_norm_updates_the_stream_in_place():
    x, r, w = randn(3, 200), randn(3, 200, seed=1), _norm_weight(200)
    expected_h, expected_normed = R.residual_rms_norm(x, r.clone(), w)
    h, normed = FUSION.residual_rms_norm(x, r, w, h_out=r)
    assert h.data_ptr() == r.data_ptr() and torch.equal(r, expected_h)
    assert rel(normed, expected_normed) < 1e-6


def test_residual_norm_with_an_fp32_stream_under_fp16():
    """fp16 mode: the sublayer's output in fp16, the stream in fp32; h stays fp32, the normed copy is fp16."""
    x = randn(2, 64, dtype=torch.float16, scale=100.0)
    r = randn(2, 64, scale=100.0, seed=1)
    r[0, 0], x[0, 0] = 60000.0, 30000.0                     # their sum passes fp16's 65504
    h, normed = FUSION.residual_rms_norm(x, r, _norm_weight(64))
    assert h.dtype == torch.float32 and normed.dtype == torch.float16
    assert torch.equal(h, r + x.float()) and torch.isfinite(normed).all()
    assert rel(normed, R.rms_norm(r.double() + x.double(), _norm_weight(64).double())) < 1e-3


# RMSNorm + projection ---------------------------------------------------------------------------------
def test_statistic_covers_the_whole_row_not_each_tile():
    """x loud in its first K tile and quiet in the others: a norm computed per tile (each tile scaled by
    its own rms) is 4x off here; the fused kernel matches the reference."""
    K = 200                                                 # 4 K steps of 64 under the interpreter
    x = randn(1, K)
    x[:, :64] *= 20.0
    w, nw = _weights(70, K), _norm_weight(K)
    assert rel(FUSION.rms_norm_linear(x, nw, w), R.rms_norm_linear(x.double(), nw.double(), w.double())) < 1e-6

    def per_tile_norm_linear(x, norm_weight, weight, eps=1e-6, out=None):
        tiles = [R.rms_norm(t, nw_t, eps) for t, nw_t in zip(x.split(64, -1), norm_weight.split(64))]
        return out.copy_(R.linear(torch.cat(tiles, -1), weight))

    slot = get_slot("fused_rmsnorm_linear")
    report = check_fn(per_tile_norm_linear, slot.reference, slot.make_inputs, slot.make_out,
                      shape={"M": 1, "N": 70, "K": K}, seed=0)
    assert not report.passed                                # the generic check catches it too


def test_one_token_and_a_prompt_agree():
    """Row 0 of a 19-token prompt (GEMM path) equals the same token alone (GEMV path)."""
    x, nw, w = randn(19, 130), _norm_weight(130), _weights(75, 130)
    assert rel(FUSION.rms_norm_linear(x[:1], nw, w), FUSION.rms_norm_linear(x, nw, w)[:1]) < 1e-6


@pytest.mark.parametrize("lead", [(130,), (1, 130), (2, 3, 130)], ids=["[K]", "[1,K]", "[2,3,K]"])
def test_leading_dims_are_kept(lead):
    x, nw, w = randn(*lead), _norm_weight(130), _weights(40, 130)
    y = FUSION.rms_norm_linear(x, nw, w)
    assert y.shape == (*lead[:-1], 40)
    assert rel(y, R.rms_norm_linear(x.double(), nw.double(), w.double())) < 1e-6


def test_gpu_gemv_configs():
    """The GPU's programs (run by the interpreter on a CPU): 2 rows, or 4 where the norm is fused (8 when
    gated too), for K inside one step and K over several steps plus a tail, unrolled: the statistic
    accumulated across steps; the in-projection with the conv's epilogue keeps its walk a loop."""
    for N, K in [(5120, 1024), (8224, 1024), (248320, 1024)]:
        cfg = FUSION.fused_gemv_config(N, K)
        assert cfg["BLOCK_N"] * cfg["BLOCK_K"] == 16 * 32 * cfg["num_warps"]    # 16 elements a thread
        normed = FUSION.fused_gemv_config(N, K, norm=True)
        # the norm's own loads shared by 4 rows, except where the LM head's many programs keep 2
        assert normed["BLOCK_N"] == (2 if N == 248320 else 4) and normed["BLOCK_K"] <= K
        assert normed["UNROLL"] == K and FUSION.fused_gemv_config(N, K, norm=True, conv=True)["UNROLL"] == 0
    assert FUSION.fused_gemv_config(1024, 8192, norm=True)["UNROLL"] == 0          # 32 steps: a loop
    walks = set()
    for n, k in [(9, 70), (7, 3000)]:
        x, nw, w, u = randn(1, k), _norm_weight(k), _weights(n, k), _weights(n, k, seed=3)
        normed = R.rms_norm(x.double(), nw.double())
        for norm_config, gated in [(False, True), (True, False), (True, True)]:
            cfg = FUSION.fused_gemv_config(1024, k, norm=norm_config, gated=gated)
            walks.add(cfg["UNROLL"] > 0)
            y = torch.full((1, n), float("nan"), device=RT.device)
            FUSION.fused_gemv_kernel[(triton.cdiv(n, cfg["BLOCK_N"]),)](
                x, nw, w, u, y, n, k, 1e-6, w, w, 0, HAS_NORM=True, GATED=gated, BLOCK_N=cfg["BLOCK_N"],
                BLOCK_K=cfg["BLOCK_K"], UNROLL=cfg["UNROLL"])
            want = R.swiglu(normed @ w.double().T, normed @ u.double().T) if gated else normed @ w.double().T
            assert rel(y, want) < 1e-6, (n, k, cfg, gated)
    assert walks == {True, False}                          # both walks ran: unrolled, and the loop (k = 3000)


@pytest.mark.parametrize("M,N,gated", [(3, 5000, False), (300, 130, False), (100, 70, True), (300, 70, True)])
def test_every_gpu_gemm_config_branch(M, N, gated, monkeypatch):
    """Each tile configuration of the GPU (run by the interpreter on a CPU), norm folded in."""
    monkeypatch.setattr(FUSION, "_max_shared_memory", lambda index: 228 * 1024)    # an H200's
    cfg = FUSION.fused_gemm_config(M, N, 40, gated, torch.float32, torch.device("cuda"))
    assert min(cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]) >= 16 and cfg["num_stages"] >= 1
    x, nw, w, u = randn(M, 40), _norm_weight(40), _weights(N, 40), _weights(N, 40, seed=3)
    y = torch.full((M, N), float("nan"), device=RT.device)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]), triton.cdiv(N, cfg["BLOCK_N"]))
    FUSION.fused_gemm_kernel[grid](x, nw, w, u, y, M, N, 40, 1e-6, HAS_NORM=True, GATED=gated,
                                   BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"])
    normed = R.rms_norm(x.double(), nw.double())
    ref = R.swiglu(normed @ w.double().T, normed @ u.double().T) if gated else normed @ w.double().T
    assert rel(y, ref) < 1e-6


def test_gemm_stages_fit_the_shared_memory(monkeypatch):
    monkeypatch.setattr(FUSION, "_max_shared_memory", lambda index: 64 * 1024)     # a T4's 64 KB
    for gated in (False, True):
        cfg = FUSION.fused_gemm_config(128, 3584, 1024, gated, torch.float16, torch.device("cuda"))
        stage = (cfg["BLOCK_M"] + (1 + gated) * cfg["BLOCK_N"]) * cfg["BLOCK_K"] * 2
        assert cfg["num_stages"] * stage <= 64 * 1024


# gate/up + SwiGLU -------------------------------------------------------------------------------------
@pytest.mark.parametrize("M", [1, 19])
def test_stacked_and_separate_weights_give_the_same_bits(M):
    x, g, u = randn(M, 130), _weights(90, 130), _weights(90, 130, seed=3)
    assert torch.equal(FUSION.gate_up_swiglu_merged(x, torch.cat([g, u])), FUSION.gate_up_swiglu(x, g, u))


@pytest.mark.parametrize("M", [1, 19])
def test_triple_fusion_equals_the_unfused_kernels(M):
    """ln2 + gate/up + SwiGLU in one kernel against RMSNorm, the GEMV/GEMM and SwiGLU as three."""
    x, nw, gu = randn(M, 130), _norm_weight(130), _weights(180, 130)
    unfused = swiglu_merged(linear(rms_norm(x, nw), gu))
    assert rel(FUSION.rms_norm_gate_up_swiglu(x, nw, gu), unfused) < 1e-5


def test_matches_the_transformers_norm_and_mlp():
    """down(rms_norm_gate_up_swiglu(h)) == Qwen3_5MLP(Qwen3_5RMSNorm(h)), zero-centred weight included."""
    from transformers.models.qwen3_5 import modeling_qwen3_5 as hf
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
    config = Qwen3_5TextConfig(hidden_size=48, intermediate_size=80, hidden_act="silu")
    mlp = hf.Qwen3_5MLP(config, intermediate_size=80).to(RT.device)
    norm = hf.Qwen3_5RMSNorm(48, eps=1e-6).to(RT.device)
    h = randn(5, 48)
    with torch.no_grad():
        norm.weight.copy_(_norm_weight(48))
        gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])          # [160, 48]
        for rows in (h[:1], h):                                                  # GEMV and GEMM
            ours = mlp.down_proj(FUSION.rms_norm_gate_up_swiglu(rows, norm.weight, gate_up))
            assert rel(ours, mlp(norm(rows))) < 1e-5


def test_zero_tokens():
    x = torch.empty(0, 64, device=RT.device)
    assert FUSION.rms_norm_linear(x, _norm_weight(64), _weights(8, 64)).shape == (0, 8)
    h, normed = FUSION.residual_rms_norm(x, x, _norm_weight(64))
    assert h.shape == normed.shape == (0, 64)


def test_bad_input_is_named():
    x, nw, w = randn(2, 64), _norm_weight(64), _weights(8, 64)
    with pytest.raises(ValueError, match=r"norm_weight has shape \[63\]"):
        FUSION.rms_norm_linear(x, _norm_weight(63), w)
    with pytest.raises(ValueError, match="last dimension must be K = 64"):
        FUSION.rms_norm_linear(randn(2, 65), nw, w)
    with pytest.raises(TypeError, match="x has dtype float16"):
        FUSION.rms_norm_linear(x.half(), nw, w)
    with pytest.raises(ValueError, match="eps must be positive"):
        FUSION.rms_norm_linear(x, nw, w, eps=0.0)
    with pytest.raises(ValueError, match=r"up_weight has shape \[9, 64\]"):
        FUSION.gate_up_swiglu(x, w, _weights(9, 64))
    with pytest.raises(ValueError, match=r"first dim must be 2 \* I"):
        FUSION.gate_up_swiglu_merged(x, _weights(9, 64))
    with pytest.raises(ValueError, match=r"out has shape \[2, 8\]"):
        FUSION.rms_norm_gate_up_swiglu(x, nw, w, out=torch.empty(2, 8, device=RT.device))
    with pytest.raises(ValueError, match=r"residual has shape \[2, 63\]"):
        FUSION.residual_rms_norm(x, randn(2, 63), nw)
    with pytest.raises(TypeError, match="residual has dtype float16"):
        FUSION.residual_rms_norm(x, x.half(), nw)
    with pytest.raises(TypeError, match="h_out has dtype float16"):
        FUSION.residual_rms_norm(x, x, nw, h_out=torch.empty(2, 64, dtype=torch.float16, device=RT.device))
    with pytest.raises(ValueError, match="contiguous"):
        FUSION.residual_rms_norm(randn(64, 2).t(), x, nw)


# GPU ------------------------------------------------------------------------------------------------
def _unfused(name):
    """The sequence of the course's own unfused kernels that a fused slot replaces."""
    return {
        "residual_rmsnorm": lambda x, residual, weight: (lambda h: (h, rms_norm(h, weight)))(
            residual_add(x, residual)),
        "fused_rmsnorm_linear": lambda x, norm_weight, weight: linear(rms_norm(x, norm_weight), weight),
        "fused_gate_up_silu.merged": lambda x, gate_up_weight: swiglu_merged(linear(x, gate_up_weight)),
        "fused_gate_up_silu.ln2": lambda x, norm_weight, gate_up_weight: swiglu_merged(
            linear(rms_norm(x, norm_weight), gate_up_weight)),
    }[name]


GPU_CASES = [("residual_rmsnorm", 0), ("fused_rmsnorm_linear", 0), ("fused_rmsnorm_linear", 1),
             ("fused_gate_up_silu.merged", 0), ("fused_gate_up_silu.ln2", 0)]


@pytest.mark.gpu
@pytest.mark.parametrize("name,index", GPU_CASES + [("fused_rmsnorm_linear", 3), ("fused_gate_up_silu.ln2", 1)])
def test_bf16_fused_within_rounding_of_the_unfused_kernels(name, index):
    """Real shapes in bf16: the fused result is as close to fp64 as the unfused kernels' (it skips roundings)."""
    slot = get_slot(name)
    inputs = slot.make_inputs(slot.shape("real", index), torch.bfloat16, "cuda",
                              torch.Generator(device="cuda").manual_seed(0))
    fused = getattr(FUSION, slot.function)(**inputs)
    unfused = _unfused(name)(**inputs)
    exact = slot.reference(**{k: v.double() for k, v in inputs.items()})
    fused, unfused, exact = (t if isinstance(t, tuple) else (t,) for t in (fused, unfused, exact))
    for f, u, e in zip(fused, unfused, exact):
        assert rel(f, e) <= 1.1 * rel(u, e) + 1e-4


@pytest.mark.gpu
def test_fused_kernels_replay_in_a_cuda_graph():
    """No host sync in any wrapper: captured once, replayed on new inputs copied into the same buffers."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    for name in ("residual_rmsnorm", "fused_rmsnorm_linear", "fused_gate_up_silu.ln2", "fused_rmsnorm_linear.conv"):
        slot = get_slot(name)
        inputs = slot.make_inputs(slot.shape("real", 0), torch.bfloat16, "cuda", gen)
        outs = slot.make_out(inputs)
        fn = getattr(FUSION, slot.function)
        fn(**inputs, **outs)                                   # compile outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn(**inputs, **outs)
        fresh = slot.make_inputs(slot.shape("real", 0), torch.bfloat16, "cuda", gen)
        for key, value in fresh.items():
            inputs[key].copy_(value)
        graph.replay()
        expected = fn(**fresh)
        expected = expected if isinstance(expected, tuple) else (expected,)
        for got, want in zip(outs.values(), expected):
            assert torch.equal(got, want), name


@pytest.mark.gpu
@pytest.mark.timing
@pytest.mark.parametrize("name", ["residual_rmsnorm", "fused_rmsnorm_linear", "fused_gate_up_silu.merged",
                                  "fused_gate_up_silu.ln2"])
def test_decode_fusion_is_faster_than_the_unfused_kernels(name):
    """One token: the fused kernel saves at least one launch (~1 us in a graph) over the unfused sequence."""
    from tritonllm_course.measure.benchmark import bench
    slot = get_slot(name)
    best = None
    for _ in range(3):   # best of three: the graph replays are steady, the first run may not be
        result = bench(name, "solutions", shape=slot.shape("real", 0), compile=False, verbose=False,
                       extra={"unfused": _unfused(name)})
        best = result if best is None else best
        best.times_us = {k: min(v, result.times_us[k]) for k, v in best.times_us.items()}
    assert best.times_us["triton"] + 0.3 <= best.times_us["unfused"], str(best)
