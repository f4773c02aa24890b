"""The autotuned projections beyond the generic slot checks: the search spaces (chapter 05_projections's hand-picked
configs inside them; every GPU config computing the right result under the interpreter), the pruning rules,
the GEMM's bucketed key, the autotuner's cache (a second call with the same key benchmarks nothing),
`restore_value` and `reset_to_zero`, bad input, the model, the GPU measurements' plumbing.
On a GPU: tuned against hand-picked at the real shapes; tuning before CUDA-graph capture."""
import pytest
import torch
import triton
import triton.language as tl

from tritonllm_course.measure import autotune_bench as B
from tritonllm_course import kernels
from tritonllm_course.runtime import runtime

RT = runtime()
AT = kernels.load("autotune", "solutions").module
LIN = kernels.load("linear", "solutions").module
H200_SMS, H200_SHARED = 132, 232448
DECODE = [(5120, 1024), (8224, 1024), (7168, 1024), (1024, 3584), (1024, 2048), (248320, 1024)]


def _pair(M, N, K, dtype=torch.float32, seed=0):
    g = torch.Generator(device=RT.device).manual_seed(seed)
    x = torch.randn(M, K, generator=g, device=RT.device).to(dtype)
    w = (0.02 * torch.randn(N, K, generator=g, device=RT.device)).to(dtype)
    return x, w


def _rel(out, x, w):
    ref = x.double() @ w.double().T
    return (torch.linalg.vector_norm(out.double() - ref) / torch.linalg.vector_norm(ref)).item()


def _tiles(configs):
    return [(*c.kwargs.values(), c.num_warps) for c in configs]


def _forget(kernel, N, K):
    """Drop the autotuner's cached choices for this shape: the next call tunes it again."""
    for key in [k for k in kernel.cache if k[:2] == (N, K)]:
        del kernel.cache[key]


# --- the search spaces --------------------------------------------------------------------------------
@pytest.mark.parametrize("N,K", DECODE)
def test_gemv_space_keeps_chapter_05s_config(N, K):
    """The hand-picked config is in the space and survives pruning: tuning can only match or beat it."""
    kept = AT.select_gemv_configs(AT.gemv_configs(), N, K, H200_SMS)
    assert any(B.same_config(c, LIN.gemv_config(N, K)) for c in kept), (LIN.gemv_config(N, K), _tiles(kept))


@pytest.mark.parametrize("M", [100, 128, 256])
@pytest.mark.parametrize("N,K", [(5120, 1024), (8224, 1024), (7168, 1024), (1024, 3584), (1024, 2048)])
def test_gemm_space_keeps_chapter_05s_config(M, N, K, monkeypatch):
    monkeypatch.setattr(LIN, "_shared_memory", lambda device: H200_SHARED)
    hand = LIN.gemm_config(M, N, K, torch.bfloat16, torch.device("cuda"))
    kept = AT.select_gemm_configs(AT.gemm_configs(), AT.bucket_m(M), K, H200_SHARED, 2)
    assert any(B.same_config(c, hand) for c in kept), (hand, _tiles(kept))


def test_gemv_space_is_explicit():
    tiles = _tiles(AT.gemv_configs())
    assert len(tiles) == len(set(tiles)) == 20
    for bn, bk, warps in tiles:
        assert bn * bk // (32 * warps) in (8, 16) and 1 <= warps <= 16     # elements per thread, warps
        assert bk & (bk - 1) == 0 and bn & (bn - 1) == 0                    # tl.arange: powers of two


def test_every_gpu_gemv_config_computes_the_gemv():
    """Each config of the GPU's space, launched directly under the interpreter: a partial last row block,
    K over two 512-wide steps plus a tail, and K under one 2048-wide step."""
    x, w = _pair(1, 9, 1100)
    for cfg in AT.gemv_configs():
        y = torch.full((1, 9), float("nan"), device=RT.device)
        grid = (triton.cdiv(9, cfg.kwargs["BLOCK_N"]),)
        AT.gemv_autotuned_kernel.fn[grid](x, w, y, 9, 1100, **cfg.all_kwargs())
        assert _rel(y, x, w) < 1e-6, B.label(cfg)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float16, 1e-3)], ids=["fp32", "fp16"])
def test_every_gpu_gemm_config_computes_the_gemm(dtype, tol):
    """Each config of the GPU's space that fits this device's shared memory in this dtype by the pruning's
    estimate (all of them under the interpreter; on an H200 fp32 drops the biggest tiles), launched
    directly. On a GPU the compiled kernel's real shared memory must be within that estimate: then every
    config the autotuner may pick can launch. fp16 stands for the 2-byte dtypes (the interpreter's bf16
    is unreliable)."""
    x, w = _pair(20, 40, 150, dtype)
    _, shared = AT.device_limits(x.device)
    configs = [c for c in AT.gemm_configs() if AT.gemm_shared_bytes(c, x.element_size()) <= shared]
    assert configs
    for cfg in configs:
        y = torch.full((20, 40), float("nan"), dtype=dtype, device=RT.device)
        grid = (triton.cdiv(20, cfg.kwargs["BLOCK_M"]), triton.cdiv(40, cfg.kwargs["BLOCK_N"]))
        compiled = AT.gemm_autotuned_kernel.fn[grid](x, w, y, 20, 40, 150, AT.bucket_m(20), **cfg.all_kwargs())
        assert _rel(y, x, w) < tol, B.label(cfg)
        if RT.on_gpu:
            assert compiled.metadata.shared <= AT.gemm_shared_bytes(cfg, x.element_size()), B.label(cfg)


# --- pruning and the bucket ----------------------------------------------------------------------------
def test_gemv_pruning_at_the_h200_shapes():
    space = AT.gemv_configs()
    narrow = _tiles(AT.select_gemv_configs(space, 1024, 2048, H200_SMS))
    assert len(narrow) == 17 and {t[0] for t in narrow} == {1, 2, 4}      # 8 rows: 128 programs < 132 SMs
    tall = _tiles(AT.select_gemv_configs(space, 5120, 1024, H200_SMS))
    assert len(tall) == 15 and max(t[1] for t in tall) == 1024              # no 2048-wide step for K = 1024
    # a tiny weight: every config is wider than K (the 512s stay) and none fills the SMs (1 row stays)
    assert _tiles(AT.select_gemv_configs(space, 16, 100, H200_SMS)) == [(1, 512, 1), (1, 512, 2)]
    assert len(AT.select_gemv_configs(space, 16, 4096, 1)) == 20          # one SM: nothing is idle


@pytest.mark.parametrize("sms", [1, 40, 132])
@pytest.mark.parametrize("N,K", [(1, 1), (16, 100), (300, 700), (1024, 2048), (248320, 1024)])
def test_gemv_pruning_rules(N, K, sms):
    space = AT.gemv_configs()
    kept = AT.select_gemv_configs(space, N, K, sms)
    assert kept and [c for c in space if c in kept] == kept                # a non-empty subset, in order
    widest = max(triton.next_power_of_2(K), 512)
    assert all(c.kwargs["BLOCK_K"] <= widest for c in kept)
    busy = [c for c in kept if triton.cdiv(N, c.kwargs["BLOCK_N"]) >= sms]
    assert busy == kept or {c.kwargs["BLOCK_N"] for c in kept} == {1}


def test_bucket_m():
    assert [AT.bucket_m(m) for m in (1, 11, 16, 17, 77, 100, 128, 129, 300)] == \
        [16, 16, 16, 32, 128, 128, 128, 256, 512]


def test_gemm_pruning():
    space = AT.gemm_configs()
    assert _tiles(AT.select_gemm_configs(space, 16, 1024, H200_SHARED, 2)) == [(16, 64, 128, 4)]
    short_k = AT.select_gemm_configs(space, 128, 64, H200_SHARED, 2)       # K = 64: no 128-wide step
    assert {c.kwargs["BLOCK_K"] for c in short_k} == {64} and len(short_k) == 3
    fp32 = AT.select_gemm_configs(space, 128, 1024, H200_SHARED, 4)        # fp32 tiles: twice the bytes
    assert all(c.num_stages * (c.kwargs["BLOCK_M"] + c.kwargs["BLOCK_N"]) * c.kwargs["BLOCK_K"] * 4
               <= H200_SHARED for c in fp32) and len(fp32) < len(space)
    assert _tiles(AT.select_gemm_configs(space, 16, 1024, 1000, 2)) == [(16, 64, 128, 4)]   # none fits


# --- the autotuner's cache ------------------------------------------------------------------------------
def test_a_second_call_with_the_same_key_benchmarks_nothing():
    kernel = AT.gemv_autotuned_kernel
    x, w = _pair(1, 45, 70)
    _forget(kernel, 45, 70)
    _forget(kernel, 45, 69)
    n_configs = len(AT.select_gemv_configs(kernel.configs, 45, 70, AT.device_limits(x.device)[0]))
    with B.tuning_log(kernel) as log:
        AT.autotuned_gemv(x, w)
        assert log.benchmarks == n_configs > 1 and len(log.keys) == 1
        assert log.keys[0][:2] == (45, 70) and "torch.float32" in log.keys[0]     # Triton adds the dtypes
        y = AT.autotuned_gemv(x, w)
        assert log.benchmarks == n_configs, "the second call with the same key benchmarked again"
        AT.autotuned_gemv(x.half(), w.half())                              # new key: the dtype
        AT.autotuned_gemv(x[:, :69].contiguous(), w[:, :69].contiguous())  # new key: K
        assert log.benchmarks == 3 * n_configs and len(log.keys) == 3
    assert _rel(y, x, w) < 1e-6


def test_the_gemm_tunes_once_per_bucket_not_once_per_length():
    lengths = (17, 20, 31, 32, 33, 40)                   # buckets 32 (4 lengths) and 64 (2)
    bucketed = B.retuning(AT, lengths, ["M_BUCKET", "N", "K"], N=24, K=40)
    per_length = B.retuning(AT, lengths, ["M", "N", "K"], N=24, K=40)
    # each tuning times the configs that survive pruning for its bucket (retuning runs in RT.dtype)
    _, shared = AT.device_limits(torch.device(RT.device))
    n32, n64 = (len(AT.select_gemm_configs(AT.gemm_autotuned_kernel.configs, bucket, 40, shared,
                                           RT.dtype.itemsize)) for bucket in (32, 64))
    if RT.interpreted:                  # the interpreter's space: 2 configs fit a 32-row bucket, 3 a 64-row one
        assert (n32, n64) == (2, 3)
    assert (bucketed["tunings"], bucketed["configs"]) == (2, n32 + n64)
    assert (per_length["tunings"], per_length["configs"]) == (6, 4 * n32 + 2 * n64)
    assert [p["tuned"] for p in bucketed["prompts"]] == [True, False, False, False, True, False]


@triton.jit
def _double_in_place_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 2 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def _sum_into_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr, tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0)))


CONFIGS = [triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})]


@pytest.mark.parametrize("restore", [False, True])
def test_restore_value_undoes_the_benchmark_runs_of_an_in_place_kernel(restore):
    kernel = triton.autotune(CONFIGS, key=["n"], restore_value=["x_ptr"] if restore else None)(
        _double_in_place_kernel)
    x = torch.ones(40, device=RT.device)
    with B.tuning_log(kernel) as log:
        kernel[lambda meta: (triton.cdiv(40, meta["BLOCK"]),)](x, 40)
    if restore:
        assert torch.all(x == 2.0)
    else:                                               # every benchmark run doubled x too
        assert log.benchmarks == 2 and torch.all(x > 2.0)


@pytest.mark.parametrize("reset", [False, True])
def test_reset_to_zero_clears_an_accumulator_before_each_benchmark_run(reset):
    kernel = triton.autotune(CONFIGS, key=["n"], reset_to_zero=["out_ptr"] if reset else None)(_sum_into_kernel)
    x, out = torch.ones(40, device=RT.device), torch.zeros(1, device=RT.device)
    kernel[lambda meta: (triton.cdiv(40, meta["BLOCK"]),)](x, out, 40)
    assert (out.item() == 40.0) == reset


# --- the wrappers ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("lead", [(), (1,), (3,), (2, 5)], ids=["[K]", "[1,K]", "[3,K]", "[2,5,K]"])
def test_autotuned_linear_dispatches(lead, monkeypatch):
    used = []
    for name in ("autotuned_gemv", "autotuned_gemm"):
        fn = getattr(AT, name)
        monkeypatch.setattr(AT, name, lambda *a, _fn=fn, _name=name, **k: used.append(_name) or _fn(*a, **k))
    w = _pair(1, 45, 37)[1]
    x = torch.randn(*lead, 37, device=RT.device)
    y = AT.autotuned_linear(x, w)
    assert y.shape == (*lead, 45)
    torch.testing.assert_close(y.double(), x.double() @ w.double().T, rtol=1e-5, atol=1e-6)
    assert used == (["autotuned_gemv"] if x.numel() == 37 else ["autotuned_gemm"])


@pytest.mark.parametrize("fn", ["autotuned_gemv", "autotuned_gemm"])
def test_fp16_inputs_accumulate_in_fp32(fn):
    """Each row: 2048 x (+2048), 2048 x 0.5, 2048 x (-2048); exact sum 1024. An fp16 sum loses the 0.5s
    next to 2048 or overflows to inf, in any order."""
    seg = 2048
    w = torch.cat([torch.full((16, seg), v, dtype=torch.float16, device=RT.device)
                   for v in (2048.0, 0.5, -2048.0)], dim=1)                   # [16, 3 * 2048]
    x = torch.ones(1 if fn == "autotuned_gemv" else 16, 3 * seg, dtype=torch.float16, device=RT.device)
    assert torch.all(getattr(AT, fn)(x, w) == 1024.0)


def test_empty_shapes():
    x, w = _pair(1, 0, 8)
    assert AT.autotuned_gemv(x, w).shape == (1, 0)
    x, w = _pair(0, 5, 8)
    assert AT.autotuned_gemm(x, w).shape == (0, 5)


def test_bad_input_is_named():
    x, w = _pair(2, 8, 16)
    with pytest.raises(TypeError, match="x has dtype float16; expected float32"):
        AT.autotuned_linear(x.half(), w)
    with pytest.raises(ValueError, match="last dimension must be K = 16"):
        AT.autotuned_gemm(x[:, :15].contiguous(), w)
    with pytest.raises(ValueError, match="autotuned_gemv takes one token"):
        AT.autotuned_gemv(x, w)
    with pytest.raises(ValueError, match=r"autotuned_gemm takes x of shape \[M, K\]"):
        AT.autotuned_gemm(x[0], w)
    with pytest.raises(ValueError, match="weight must be contiguous"):
        AT.autotuned_linear(x, torch.randn(16, 8, device=RT.device).t())
    with pytest.raises(ValueError, match=r"out has shape \[2, 9\]"):
        AT.autotuned_linear(x, w, out=torch.empty(2, 9, device=RT.device))


def test_swapped_into_the_model_the_tokens_do_not_change():
    from tritonllm_course.swap import compare_greedy
    report = compare_greedy({"linear": AT.autotuned_linear}, n_new=3, verbose=False)
    assert report.passed, str(report)


# --- the measurements' plumbing -------------------------------------------------------------------------
def test_bench_plumbing_runs_on_the_cpu(monkeypatch, tmp_path):
    """The GPU measurements' code paths (tables, cost, retuning, plots) with a stand-in timer."""
    import matplotlib
    matplotlib.use("Agg")
    monkeypatch.setattr(B, "DEVICE", RT.device)
    monkeypatch.setattr(B, "time_calls", lambda fn, sets: (fn(**sets[0]), 1.0)[1])
    # the GEMV configs that survive pruning at 37 x 100: the interpreter's 3; on an H200 the 2 one-row tiles
    kept = len(AT.select_gemv_configs(AT.gemv_autotuned_kernel.configs, 37, 100,
                                      AT.device_limits(torch.device(RT.device))[0]))
    assert (kept == 3) if RT.interpreted else (kept >= 1)
    table = B.config_table(AT, LIN, 37, 100, dtype=torch.float32)
    assert len(table["rows"]) == kept and table["tuned"] in [r["config"] for r in table["rows"]]
    assert all(r["autotuner_ms"] is not None for r in table["rows"]) and table["configs_timed"] == kept
    cost = B.tuning_cost(AT, 37, 100, dtype=torch.float32, counts=(1, 2, 3))
    assert [p["configs"] for p in cost["points"]] == 2 * sorted({min(n, kept) for n in (1, 2, 3)})
    retune = B.retuning(AT, (5, 20), ["M", "N", "K"], N=8, K=16)
    B.plot_config_table(table).figure.savefig(tmp_path / "table.png")
    B.plot_tuning_cost(cost).figure.savefig(tmp_path / "cost.png")
    B.plot_retuning([retune]).figure.savefig(tmp_path / "retune.png")


def test_subprocess_programs_are_valid_python():
    for warm in (False, True):
        compile(B.capture_script(warm), "capture", "exec")
    compile(B.DISK_CACHE_RUN.format(N=8, K=16, cache_results=True), "disk_cache", "exec")


# --- GPU ------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.timing
@pytest.mark.parametrize("N,K", DECODE)
def test_tuned_gemv_is_within_25_percent_of_chapter_05(N, K):
    """Chapter 05_projections's config is in the space, so the autotuner's pick is at most its time on the tuner's
    own clock (`_quick_bench`: do_bench, one launch after an L2 flush) by construction. On the course's clock (a
    CUDA graph replayed over weights past L2) the two clocks rank near configs differently: at 5,120 x 1,024 the
    H200's record (results/autotune_nvidia-h200_2026-11-30.json) has three configs within 5% on the tuner's clock
    that span 4.38-5.20 us on the graph's, and an H100 run (2026-12-07) picked one 13% behind chapter
    05_projections's. So the pick gets 25%: the slowest configs of each decode shape are 1.4-1.7x the fastest (the
    same record), and a tuner that picked by anything else fails. (Timing the two Python wrappers under do_bench
    measures the host, not the kernels: 43-55 us a call on an H100, 2026-12-07.)"""
    sets = B._input_sets(N, K, torch.bfloat16)
    AT.autotuned_gemv(**sets[0])      # tuned here (or earlier in this process), before the clock runs
    us = B.side_by_side({"tuned": AT.autotuned_gemv, "hand": LIN.gemv}, sets)
    assert us["tuned"] <= 1.25 * us["hand"], (
        f"{N} x {K}, graph replay: tuned {us['tuned']:.2f} us, chapter 05_projections {us['hand']:.2f} us")


@pytest.mark.gpu
@pytest.mark.timing
@pytest.mark.parametrize("N,K", [(5120, 1024), (1024, 3584)])
def test_tuned_gemm_is_within_15_percent_of_chapter_05(N, K):
    """As the GEMV's: the autotuner's do_bench times one launch after an L2 flush, the course a CUDA-graph
    replay of 16 weights; at M = 128 the kernels take 6 to 9 us and the two orders of the configs differ
    by up to 12.5% (H200, 2026-11-30: 8.91 us for the pick, 7.92 us for chapter 05_projections's tile)."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    sets = [{"x": torch.randn(128, K, generator=gen, device="cuda").bfloat16(),
             "weight": (0.02 * torch.randn(N, K, generator=gen, device="cuda")).bfloat16()} for _ in range(16)]
    us = B.side_by_side({"tuned": AT.autotuned_gemm, "hand": LIN.gemm}, sets)
    tuned, hand = us["tuned"], us["hand"]
    assert tuned <= 1.15 * hand, f"{N} x {K}, M = 128: tuned {tuned:.2f} us, chapter 05_projections {hand:.2f} us"


@pytest.mark.gpu
def test_first_call_tunes_and_later_calls_reuse_on_the_gpu():
    kernel = AT.gemv_autotuned_kernel
    x, w = _pair(1, 4096, 1024, torch.bfloat16)
    _forget(kernel, 4096, 1024)
    with B.tuning_log(kernel) as log:
        AT.autotuned_gemv(x, w)
        first = log.benchmarks
        for _ in range(3):
            AT.autotuned_gemv(x, w)
    assert first == len(AT.select_gemv_configs(kernel.configs, 4096, 1024, AT.device_limits(x.device)[0]))
    assert log.benchmarks == first and len(log.keys) == 1


@pytest.mark.gpu
def test_tuning_must_happen_before_graph_capture():
    env = {"TRITONLLM_KERNELS": "solutions"}
    failed = B.run_apart(B.capture_script(warm=False), env)
    assert not failed.startswith("exit status 0"), failed
    fixed = B.run_apart(B.capture_script(warm=True), env)
    assert fixed.startswith("exit status 0: captured and replayed"), fixed
    assert float(fixed.rsplit(" ", 1)[1]) < 2e-2, fixed
