"""Chapter 22_layer_fusion's fused kernels beyond the generic slot checks: the residual add in the projections' epilogue
(in place, every GPU tile configuration), the q/k norm + RoPE + cache write (only its cache rows, only
the rotary dims, Qwen's pairs, a position past the cache), the decode kernels' bad input."""
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
FUSION = kernels.load("layer_fusion", "solutions").module


def _weights(N, K, dtype=torch.float32, seed=1):
    return randn(N, K, dtype=dtype, scale=0.02, seed=seed)


# projection + residual add ------------------------------------------------------------------------------
@pytest.mark.parametrize("M", [1, 19], ids=["GEMV", "GEMM"])
def test_linear_residual_updates_the_stream_in_place(M):
    x, w, r = randn(M, 130), _weights(70, 130), randn(M, 70, seed=2)
    expected = R.linear_residual(x.double(), w.double(), r.double())
    y = FUSION.linear_residual(x, w, r, out=r)
    assert y.data_ptr() == r.data_ptr() and rel(r, expected) < 1e-6


def test_gpu_gemv_residual_config():
    """Chapter 05_projections's programs on the GPU (run by the interpreter on a CPU): 2 rows, 16 elements a thread,
    K in one step or several plus a tail."""
    for N, K in [(1024, 2048), (1024, 3584)]:
        cfg = FUSION.gemv_residual_config(N, K)
        assert cfg["BLOCK_N"] == 2 and cfg["BLOCK_N"] * cfg["BLOCK_K"] == 16 * 32 * cfg["num_warps"]
    for n, k in [(9, 70), (7, 3000)]:
        x, w, r = randn(1, k), _weights(n, k), randn(1, n, seed=2)
        cfg = FUSION.gemv_residual_config(1024, k)
        y = torch.full((1, n), float("nan"), device=RT.device)
        FUSION.gemv_residual_kernel[(triton.cdiv(n, cfg["BLOCK_N"]),)](x, w, r, y, n, k, BLOCK_N=cfg["BLOCK_N"],
                                                                        BLOCK_K=cfg["BLOCK_K"])
        assert rel(y, R.linear_residual(x.double(), w.double(), r.double())) < 1e-6, (n, k, cfg)


@pytest.mark.parametrize("M,N", [(3, 5000), (130, 100), (300, 130)])
def test_every_gpu_gemm_residual_config_branch(M, N, monkeypatch):
    """Each tile configuration of the GPU (run by the interpreter on a CPU): wide N, the thin tiles of the
    1024-row out-projections, the square tiles of long prompts."""
    monkeypatch.setattr(FUSION, "_max_shared_memory", lambda index: 228 * 1024)    # an H200's
    monkeypatch.setattr(FUSION, "_sm_count", lambda device: 132)
    cfg = FUSION.gemm_residual_config(M, N, 40, torch.float32, torch.device("cuda"))
    assert min(cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]) >= 16 and cfg["num_stages"] >= 1
    x, w, r = randn(M, 40), _weights(N, 40), randn(M, N, seed=2)
    y = torch.full((M, N), float("nan"), device=RT.device)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]), triton.cdiv(N, cfg["BLOCK_N"]))
    FUSION.gemm_residual_kernel[grid](x, w, r, y, M, N, 40, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
                                      BLOCK_K=cfg["BLOCK_K"])
    assert rel(y, R.linear_residual(x.double(), w.double(), r.double())) < 1e-6


@pytest.mark.parametrize("gpu", ["H200", "T4"])
def test_gemm_residual_tiles_of_long_prompts_make_about_one_wave(gpu, monkeypatch):
    """From M = 256 on, the 1024-row out-projections take the widest 128-row tile that still makes about one
    wave on an H200, as measured there (lab/prompt_gemm_sweep.py); a GPU whose shared memory holds none of
    those tiles' stages (a T4) keeps the square tiles, its stages capped."""
    shared, sms = {"H200": (232448, 132), "T4": (64 * 1024, 40)}[gpu]
    monkeypatch.setattr(FUSION, "_max_shared_memory", lambda index: shared)
    monkeypatch.setattr(FUSION, "_sm_count", lambda device: sms)
    picks = {M: FUSION.gemm_residual_config(M, 1024, 2048, torch.bfloat16, torch.device("cuda"))
             for M in (256, 1024, 2048, 4096)}
    tiles = {M: (c["BLOCK_N"], c["BLOCK_K"], c["num_stages"]) for M, c in picks.items()}
    if gpu == "H200":
        assert tiles == {256: (64, 128, 4), 1024: (64, 128, 4), 2048: (128, 64, 3), 4096: (256, 64, 3)}
    else:
        assert set(tiles.values()) == {(128, 64, 2)}
    for c in picks.values():
        assert c["BLOCK_M"] == 128 and c["num_stages"] * (128 + c["BLOCK_N"]) * c["BLOCK_K"] * 2 <= shared
    assert FUSION.gemm_residual_config(4096, 5120, 1024, torch.bfloat16, torch.device("cuda"))["BLOCK_N"] == 128


def test_gemm_residual_stages_fit_the_shared_memory(monkeypatch):
    monkeypatch.setattr(FUSION, "_max_shared_memory", lambda index: 64 * 1024)     # a T4's 64 KB
    for N in (1024, 5120):
        cfg = FUSION.gemm_residual_config(128, N, 2048, torch.float16, torch.device("cuda"))
        assert cfg["num_stages"] * (cfg["BLOCK_M"] + cfg["BLOCK_N"]) * cfg["BLOCK_K"] * 2 <= 64 * 1024


def test_bad_input_is_named():
    """The decode kernels that read views of the in-projection's output: token rows, each contiguous."""
    q, v = randn(1, 2, 16), randn(1, 4, 16)
    ab, A_log = randn(1, 8), randn(4)
    with pytest.raises(ValueError, match="a must be contiguous within each token"):
        FUSION.gated_delta_rule_recurrent_gates(q, q, v, ab[:, ::2], ab[:, :4], A_log, A_log)
    with pytest.raises(ValueError, match="z must be contiguous within each token"):
        FUSION.gated_norm_linear_residual(v, randn(1, 16, 4).transpose(1, 2), randn(16, scale=0.1),
                                          _weights(8, 64), randn(1, 8))
    with pytest.raises(ValueError, match=r"residual has shape \[2, 63\]"):
        FUSION.linear_residual(randn(2, 64), _weights(8, 64), randn(2, 63))


# q/k norm + RoPE + cache write ------------------------------------------------------------------------------
def _prologue_case(T=5, start=3):
    slot = get_slot("qk_norm_rope_cache")
    gen = torch.Generator(device=RT.device).manual_seed(T)
    shape = {"T": T, "heads": 4, "kv_heads": 2, "head_dim": 32, "rotary_dim": 8, "max_len": 16}
    inputs = slot.make_inputs(shape, torch.float32, RT.device, gen)
    inputs["pos"] = torch.arange(start, start + T, dtype=torch.int32, device=RT.device)
    return slot, inputs


def test_prologue_writes_only_its_cache_rows_and_rotates_only_the_rotary_dims():
    slot, inputs = _prologue_case()
    k_before, v_before = inputs["k_cache"].clone(), inputs["v_cache"].clone()
    q_out = FUSION.qk_norm_rope_cache(**inputs)
    want_q, want_k, want_v = slot.reference(**{n: t.clone() if n.endswith("cache") else t for n, t in inputs.items()})
    assert rel(q_out, want_q) < 1e-5 and rel(inputs["k_cache"], want_k) < 1e-5
    assert torch.equal(inputs["v_cache"], want_v)                              # v is copied, not computed
    rows = torch.arange(16, device=RT.device)
    untouched = (rows < 3) | (rows >= 8)
    assert torch.equal(inputs["k_cache"][untouched], k_before[untouched])
    assert torch.equal(inputs["v_cache"][untouched], v_before[untouched])
    normed = R.qk_norm(inputs["q"], inputs["q_weight"])
    assert torch.allclose(q_out[..., 8:], normed[..., 8:], rtol=1e-6, atol=1e-6)   # dims past rotary_dim: normed only


def test_prologue_with_gpt_j_pairs_fails_the_check():
    """The rotate-half partner of dim d is d +- rotary_dim / 2; (2i, 2i + 1) pairs are Qwen's wrong pairing."""
    slot, _ = _prologue_case()

    def gpt_j(q, k, v, q_weight, k_weight, cos, sin, pos, k_cache, v_cache, eps=1e-6, out=None):
        q_n, k_n = R.qk_norm(q, q_weight, eps), R.qk_norm(k, k_weight, eps)
        out.copy_(R.apply_rope_interleaved(q_n, cos, sin, pos))
        R.kv_cache_write(R.apply_rope_interleaved(k_n, cos, sin, pos), v, k_cache, v_cache, pos)
        return out

    report = check_fn(gpt_j, slot.reference, slot.make_inputs, slot.make_out, name="gpt-j prologue",
                      shape=slot.shapes["tiny"][0], mutated=slot.mutated)
    assert not report.passed


def test_prologue_refuses_a_repeated_position():
    slot, inputs = _prologue_case(T=3, start=4)
    inputs["pos"][2] = 4
    before = inputs["k_cache"].clone()
    with pytest.raises(ValueError, match="position 4 appears 2 times"):
        FUSION.qk_norm_rope_cache(**inputs)
    assert torch.equal(inputs["k_cache"], before)


def test_prologue_refuses_a_position_past_the_cache():
    slot, inputs = _prologue_case(T=2, start=15)                     # rows 15 and 16 of a 16-row cache
    with pytest.raises(ValueError, match="position 16 is outside"):
        FUSION.qk_norm_rope_cache(**inputs)


@pytest.mark.parametrize("name", ["fused_linear_residual", "gated_norm_linear_residual"])
def test_the_residual_slots_are_timed_against_pytorch_in_the_models_dtype(name, monkeypatch):
    """Their references multiply in fp32 for the check; the timing's eager baseline is what a model runs, one
    bf16 cuBLAS GEMM with the add (an fp32 GEMM of upcast weights made the fused kernels look 4x ahead)."""
    slot = get_slot(name)
    inputs = slot.make_inputs(slot.shapes["tiny"][0], torch.bfloat16, "cpu", torch.Generator().manual_seed(0))
    upcast = []
    real_linear = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear",
                        lambda x, w, *a: upcast.append(x.dtype) or real_linear(x, w, *a))
    got = (slot.torch_impl or slot.reference)(**inputs)           # what `bench` times as "torch eager"
    assert torch.float32 not in upcast and got.dtype == torch.bfloat16
    assert rel(got, slot.reference(**inputs)) < 1e-2
