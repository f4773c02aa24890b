"""The projection kernels beyond the generic slot checks: dispatch and shapes, the GPU launch
configurations run under the interpreter, fp32 accumulation, the merged QKV weight, bad input."""
import pytest
import torch
import triton

from tritonllm_course import kernels
from tritonllm_course import reference as R
from tritonllm_course.runtime import runtime

RT = runtime()
LIN = kernels.load("linear", "solutions").module


def _pair(M, N, K, dtype=torch.float32, seed=0):
    g = torch.Generator(device=RT.device).manual_seed(seed)
    x = torch.randn(M, K, generator=g, device=RT.device).to(dtype)
    w = (0.02 * torch.randn(N, K, generator=g, device=RT.device)).to(dtype)
    return x, w


def _rel(out, ref):
    return (torch.linalg.vector_norm(out.double() - ref) / torch.linalg.vector_norm(ref)).item()


@pytest.mark.parametrize("lead", [(), (1,), (3,), (2, 5)], ids=["[K]", "[1,K]", "[3,K]", "[2,5,K]"])
def test_linear_dispatches_and_keeps_the_leading_shape(lead):
    w = _pair(1, 45, 37)[1]
    x = torch.randn(*lead, 37, device=RT.device)
    y = LIN.linear(x, w)
    assert y.shape == (*lead, 45)
    assert _rel(y, x.double() @ w.double().T) < 1e-6


def test_prefill_rows_equal_decode_tokens():
    """The GEMM over a prompt gives, row by row, what the GEMV gives for each token alone."""
    x, w = _pair(21, 77, 150)
    prefill = LIN.gemm(x, w)
    decode = torch.cat([LIN.gemv(x[i:i + 1], w) for i in range(x.shape[0])])   # [21, 77]
    torch.testing.assert_close(prefill, decode, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("N,K", [(1, 3), (5, 16), (33, 2049)])
def test_gemv_edge_sizes(N, K):
    x, w = _pair(1, N, K)
    assert _rel(LIN.gemv(x, w), x.double() @ w.double().T) < 1e-6


def test_gpu_gemv_configs_run_under_the_interpreter():
    """The CPU path launches 64 rows per program; the GPU's 2-row configs are checked here too."""
    for N, K in [(1024, 3584), (5120, 1024), (248320, 1024)]:
        cfg = LIN.gemv_config(N, K)
        assert cfg["BLOCK_N"] * cfg["BLOCK_K"] == 16 * 32 * cfg["num_warps"]    # 16 elements a thread
    for n, k in [(9, 70), (7, 3000)]:      # K below one step, and K over one 2048-wide step plus a tail
        x, w = _pair(1, n, k)
        cfg = LIN.gemv_config(1024, k)
        y = torch.full((1, n), float("nan"), device=RT.device)
        LIN.gemv_kernel[(triton.cdiv(n, cfg["BLOCK_N"]),)](x, w, y, n, k, BLOCK_N=cfg["BLOCK_N"],
                                                          BLOCK_K=cfg["BLOCK_K"])
        assert _rel(y, x.double() @ w.double().T) < 1e-6


@pytest.mark.parametrize("M,N", [(3, 5000), (300, 130)], ids=["tall", "compute-bound"])
def test_every_gemm_config_branch(M, N):
    x, w = _pair(M, N, 40)
    cfg = LIN.gemm_config(M, N, 40, x.dtype, x.device)
    assert min(cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]) >= 16
    assert _rel(LIN.gemm(x, w), x.double() @ w.double().T) < 1e-6


def test_gemm_stages_fit_the_shared_memory(monkeypatch):
    monkeypatch.setattr(LIN, "_shared_memory", lambda device: 64 * 1024)        # a T4's 64 KB
    cfg = LIN.gemm_config(128, 5120, 1024, torch.bfloat16, torch.device("cuda"))
    stage = (cfg["BLOCK_M"] + cfg["BLOCK_N"]) * cfg["BLOCK_K"] * 2
    assert cfg["num_stages"] * stage <= 64 * 1024


@pytest.mark.parametrize("fn", ["gemv", "gemm"])
def test_fp16_inputs_accumulate_in_fp32(fn):
    """Each row: 2048 x (+2048), then 2048 x 0.5, then 2048 x (-2048); the exact sum is 1024. An fp16
    sum loses every 0.5 added to 2048 (its spacing there is 2) or overflows to inf: whatever the order."""
    seg = 2048
    w = torch.cat([torch.full((16, seg), v, dtype=torch.float16, device=RT.device)
                   for v in (2048.0, 0.5, -2048.0)], dim=1)                   # [16, 3 * 2048]
    x = torch.ones(1 if fn == "gemv" else 16, 3 * seg, dtype=torch.float16, device=RT.device)
    y = getattr(LIN, fn)(x, w)
    assert torch.all(y == 1024.0), y


def test_merged_qkv_weight_matches_the_separate_projections():
    """One GEMV over [q_proj | k_proj | v_proj] stacked gives the model's q, gate, k and v."""
    c = RT.config
    hidden, d = c.hidden_size, c.head_dim
    g = torch.Generator(device=RT.device).manual_seed(1)
    wq = torch.randn(c.num_attention_heads * 2 * d, hidden, generator=g, device=RT.device) * 0.02
    wk, wv = (torch.randn(c.num_key_value_heads * d, hidden, generator=g, device=RT.device) * 0.02
              for _ in range(2))
    x = torch.randn(1, hidden, generator=g, device=RT.device)
    merged = LIN.linear(x, torch.cat([wq, wk, wv]))                          # [1, 5120] at full size
    qg, k, v = merged.split([wq.shape[0], wk.shape[0], wv.shape[0]], dim=-1)
    q, gate = R.split_query_gate(qg, d)                                        # [1, heads, d], [1, heads * d]
    for got, want in zip((q, gate, k.view(1, -1, d), v.view(1, -1, d)), R.attention_qkv_proj(x, wq, wk, wv, d)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_bad_input_is_named():
    x, w = _pair(2, 8, 16)
    with pytest.raises(TypeError, match="x has dtype float16; expected float32"):
        LIN.linear(x.half(), w)
    with pytest.raises(ValueError, match="last dimension must be K = 16"):
        LIN.linear(x[:, :15].contiguous(), w)
    with pytest.raises(ValueError, match="weight must be contiguous"):
        LIN.linear(x, torch.randn(16, 8, device=RT.device).t())
    with pytest.raises(ValueError, match="gemv takes one token"):
        LIN.gemv(x, w)
    with pytest.raises(ValueError, match=r"gemm takes x of shape \[M, K\]"):
        LIN.gemm(x[0], w)
    with pytest.raises(ValueError, match=r"out has shape \[2, 9\]"):
        LIN.linear(x, w, out=torch.empty(2, 9, device=RT.device))
    with pytest.raises(TypeError, match="weight has dtype int64"):
        LIN.linear(x, torch.ones(8, 16, dtype=torch.int64, device=RT.device))


def test_swapped_into_the_model_the_tokens_do_not_change():
    from tritonllm_course.swap import compare_greedy
    report = compare_greedy({"linear": LIN.linear}, n_new=3, verbose=False)
    assert report.passed, str(report)


def _best_of_3(name, shape=None):
    """bench three times and keep each implementation's best time: single runs vary by several percent."""
    from tritonllm_course.measure.benchmark import bench
    runs = [bench(name, "solutions", shape=shape, compile=False, verbose=False) for _ in range(3)]
    best = runs[0]
    best.times_us = {impl: min(r.times_us[impl] for r in runs) for impl in best.times_us}
    return best


@pytest.mark.gpu
@pytest.mark.timing
def test_lm_head_streams_near_the_bandwidth_ceiling():
    """The largest read of a decode step: 95-105% of the copy ceiling on an H200, on par with cuBLAS."""
    result = _best_of_3("lm_head")
    assert result.gbps("triton") >= 0.85 * result.ceiling_gbps, str(result)
    assert result.times_us["triton"] <= 1.10 * result.times_us["torch eager"], str(result)


@pytest.mark.gpu
@pytest.mark.timing
@pytest.mark.parametrize("N,K", [(5120, 1024), (8224, 1024), (7168, 1024), (1024, 3584), (1024, 2048)])
def test_decode_gemvs_are_not_slower_than_cublas(N, K):
    """Measured 1.1x (tall) to 4x (narrow) faster than cuBLAS on an H200."""
    result = _best_of_3("in_proj", {"M": 1, "N": N, "K": K})
    assert result.times_us["triton"] <= 1.05 * result.times_us["torch eager"], str(result)
