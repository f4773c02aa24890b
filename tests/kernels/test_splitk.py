"""The split-K GEMV beyond the generic slot checks: the choice of the split, the pieces and their partial
sums, determinism of the two-stage reduction, the atomic accumulator's zero contract, fp32 pieces, the
GPU launch configurations under the interpreter, the dispatch of `splitk_linear`, bad input, the model.
On a GPU: bit-identical two-stage runs, the atomic variant's spread (reported), faster than cuBLAS."""
import types
import warnings

import pytest
import torch
import triton

from tritonllm_course import kernels
from tritonllm_course.runtime import runtime
from tritonllm_course.measure.splitk_bench import run_to_run

RT = runtime()
SK = kernels.load("splitk", "solutions").module


def _pair(N, K, dtype=torch.float32, seed=0):
    g = torch.Generator(device=RT.device).manual_seed(seed)
    x = torch.randn(1, K, generator=g, device=RT.device).to(dtype)
    w = (0.02 * torch.randn(N, K, generator=g, device=RT.device)).to(dtype)
    return x, w


def _rel(out, x, w):
    ref = x.double() @ w.double().T
    return (torch.linalg.vector_norm(out.double() - ref) / torch.linalg.vector_norm(ref)).item()


VARIANTS = ["splitk_gemv", "splitk_gemv_atomic"]


# --- choosing the split -----------------------------------------------------------------------------
def test_choose_split_at_the_h200_shapes():
    assert SK.choose_split(1024, 2048, 132) == 4      # o_proj / out_proj: 256 row blocks x 4 = 1024 programs
    assert SK.choose_split(1024, 3584, 132) == 7      # MLP down: 7 steps of 512, one per piece
    assert SK.choose_split(248320, 1024, 132) == 1    # LM head: 62,080 row blocks fill the GPU alone
    assert SK.choose_split(8224, 1024, 132) == 1      # the tall projections do not split either


@pytest.mark.parametrize("sms", [1, 8, 80, 132, 1000])
@pytest.mark.parametrize("N,K", [(1, 7), (16, 1024), (1024, 2048), (1024, 3584), (3000, 5000), (248320, 1024)])
def test_choose_split_fills_the_gpu_in_whole_steps(N, K, sms):
    split = SK.choose_split(N, K, sms)
    steps = triton.cdiv(K, SK.BLOCK_K)
    row_blocks = triton.cdiv(N, SK.BLOCK_N)
    target = SK.PROGRAMS_PER_SM * sms
    assert 1 <= split <= steps                          # no piece narrower than one step: small partials
    if row_blocks >= target:
        assert split == 1                               # the rows fill the GPU alone: nothing to gain
    else:
        assert row_blocks * split >= target or split == steps
    assert SK.choose_split(N, K, 2 * sms) >= split      # more SMs never want fewer pieces


@pytest.mark.parametrize("K", [1, 15, 301, 1000, 2048, 3584])
@pytest.mark.parametrize("split", [1, 2, 3, 7, 16, 64])
def test_config_pieces_cover_k_exactly_once(K, split):
    for interpreted in (False, True):
        cfg = SK.splitk_config(1024, K, split, interpreted=interpreted)
        assert cfg["K_SPLIT"] % cfg["BLOCK_K"] == 0 and cfg["BLOCK_K"] >= 16
        assert cfg["BLOCK_K"] & (cfg["BLOCK_K"] - 1) == 0                  # tl.arange needs a power of two
        assert (cfg["SPLIT"] - 1) * cfg["K_SPLIT"] < K <= cfg["SPLIT"] * cfg["K_SPLIT"]   # none empty
        assert cfg["SPLIT"] <= split
    assert SK.splitk_config(1024, 2048, 8)["SPLIT"] == 8                   # whole steps: as asked
    assert SK.splitk_config(1024, 2048, 3)["SPLIT"] == 2                   # 683 columns -> one step of 1024


# --- correctness beyond the slot's shapes -------------------------------------------------------------
@pytest.mark.parametrize("fn", VARIANTS)
@pytest.mark.parametrize("split", [1, 2, 5, 19])
def test_explicit_splits(fn, split):
    x, w = _pair(7, 301)
    y = getattr(SK, fn)(x, w, split=split)
    assert y.shape == (1, 7) and _rel(y, x, w) < 1e-6


def test_partials_hold_each_piece_sum():
    """Stage 1 alone: row s of partials is the piece's GEMV; rows past the pieces are left alone."""
    x, w = _pair(9, 250)
    cfg = SK.splitk_config(9, 250, 3, interpreted=RT.interpreted)
    partials = torch.full((cfg["SPLIT"] + 2, 9), 7.0, device=RT.device)
    SK.splitk_gemv(x[0], w, split=3, partials=partials)
    for s in range(cfg["SPLIT"]):
        lo, hi = s * cfg["K_SPLIT"], min((s + 1) * cfg["K_SPLIT"], 250)
        torch.testing.assert_close(partials[s], (w[:, lo:hi].double() @ x[0, lo:hi].double()).float(),
                                   rtol=1e-5, atol=1e-6)
    assert torch.all(partials[cfg["SPLIT"]:] == 7.0)


def test_two_stage_is_bit_identical_across_runs():
    x, w = _pair(131, 509, torch.float16)
    report = run_to_run(lambda: SK.splitk_gemv(x, w, split=4), runs=3)
    assert report["identical"], report


def test_run_to_run_reports_differences():
    """The spread measure itself can fail: outputs that change are counted."""
    calls = iter(range(10))
    report = run_to_run(lambda: torch.tensor([1.0, 2.0, float(next(calls))]), runs=3)
    assert not report["identical"] and report["differing"] == 1 and report["max_abs_diff"] == 2.0


def test_atomic_accumulator_is_left_zeroed_for_the_next_call():
    x, w = _pair(37, 1000)
    acc = torch.zeros(37, device=RT.device)
    first = SK.splitk_gemv_atomic(x, w, acc=acc, split=4)
    assert torch.all(acc == 0), "the cast step must write zeros back into the accumulator"
    second = SK.splitk_gemv_atomic(x, w, acc=acc, split=4)
    assert torch.all(acc == 0), "the cast step must write zeros back into the accumulator"
    assert _rel(first, x, w) < 1e-6 and _rel(second, x, w) < 1e-6      # the second call added no leftovers
    if RT.interpreted:                  # programs run one after another: the atomics land in one order
        assert torch.equal(first, second)


def test_an_accumulator_that_is_not_zero_adds_the_previous_call():
    """What goes wrong without the zeroing: a cast that leaves the sums in place doubles the next call."""
    x, w = _pair(37, 1000)
    acc = torch.zeros(37, device=RT.device)
    first = SK.splitk_gemv_atomic(x, w, acc=acc, split=4)
    acc.copy_(first[0])                                  # as if the previous call had not cleared it
    second = SK.splitk_gemv_atomic(x, w, acc=acc, split=4)
    torch.testing.assert_close(second, 2 * first, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn", VARIANTS)
def test_fp16_pieces_accumulate_in_fp32(fn):
    """Pieces of 2048 x (+2048), 2048 x 0.5, 2048 x (-2048): each piece's sum (4.2e6) overflows fp16, and the
    0.5s vanish next to 2048 in an fp16 running sum. Only fp32 sums and fp32 partials give 1024."""
    seg = 2048
    w = torch.cat([torch.full((16, seg), v, dtype=torch.float16, device=RT.device)
                   for v in (2048.0, 0.5, -2048.0)], dim=1)                     # [16, 3 * 2048]
    x = torch.ones(1, 3 * seg, dtype=torch.float16, device=RT.device)
    y = getattr(SK, fn)(x, w, split=3)
    assert torch.all(y == 1024.0), y


def test_gpu_configs_run_under_the_interpreter(monkeypatch):
    """The wrappers with the GPU's 4 x 512 tiles: a partial last piece and a partial last row block."""
    monkeypatch.setattr(SK, "runtime", lambda: types.SimpleNamespace(interpreted=False))
    x, w = _pair(9, 1100)
    for fn in VARIANTS:
        for split in (None, 3):
            assert _rel(getattr(SK, fn)(x, w, split=split), x, w) < 1e-6


# --- the model's linear --------------------------------------------------------------------------------
@pytest.mark.parametrize("lead", [(), (1,), (3,), (2, 5)], ids=["[K]", "[1,K]", "[3,K]", "[2,5,K]"])
def test_splitk_linear_dispatches(lead, monkeypatch):
    used = []
    splitk_gemv = SK.splitk_gemv
    monkeypatch.setattr(SK, "splitk_gemv", lambda *a, **k: used.append("splitk") or splitk_gemv(*a, **k))
    lookup = SK._linear_kernel
    monkeypatch.setattr(SK, "_linear_kernel", lambda name: used.append(name) or lookup(name))
    # one token splits where `choose_split` cuts the shape on this device: 45 rows are few row blocks
    # everywhere, and K = 1200 is 3 of the GPU's 512-wide steps (19 of the interpreter's 64-wide ones)
    w = _pair(45, 1200)[1]
    assert SK.splitk_config(45, 1200, sms=SK.device_sms(w.device), interpreted=RT.interpreted)["SPLIT"] > 1
    x = torch.randn(*lead, 1200, device=RT.device)
    y = SK.splitk_linear(x, w)
    assert y.shape == (*lead, 45)
    torch.testing.assert_close(y.double(), x.double() @ w.double().T, rtol=1e-5, atol=1e-5)
    assert used == (["splitk"] if x.numel() == 1200 else ["gemm"])


def test_splitk_linear_keeps_the_gemv_where_nothing_splits(monkeypatch):
    monkeypatch.setattr(SK, "splitk_gemv", lambda *a, **k: pytest.fail("split a shape that fills the GPU"))
    x, w = _pair(600, 64)                      # 19 row blocks of 32 >= 8 programs: one piece
    assert _rel(SK.splitk_linear(x, w), x, w) < 1e-6


def test_bad_input_is_named():
    x, w = _pair(8, 16)
    with pytest.raises(TypeError, match="x has dtype float16; expected float32"):
        SK.splitk_gemv(x.half(), w)
    with pytest.raises(ValueError, match="takes one token"):
        SK.splitk_gemv(torch.randn(2, 16, device=RT.device), w)
    with pytest.raises(ValueError, match="takes one token"):
        SK.splitk_gemv_atomic(x[:, :15].contiguous(), w)
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="split must be a positive int"):
            SK.splitk_gemv(x, w, split=bad)
    with pytest.raises(TypeError, match="partials has dtype float16"):
        SK.splitk_gemv(x, w, split=2, partials=torch.empty(2, 8, dtype=torch.float16, device=RT.device))
    x2, w2 = _pair(8, 200)                                                    # two pieces of 128 columns
    with pytest.raises(ValueError, match=r"partials has shape \[1, 8\]; expected \[S, 8\] with S >= 2"):
        SK.splitk_gemv(x2, w2, split=2, partials=torch.empty(1, 8, device=RT.device))
    with pytest.raises(ValueError, match=r"acc has shape \[9\]"):
        SK.splitk_gemv_atomic(x, w, acc=torch.zeros(9, device=RT.device))
    with pytest.raises(ValueError, match=r"out has shape \[1, 9\]"):
        SK.splitk_gemv(x, w, out=torch.empty(1, 9, device=RT.device))
    with pytest.raises(ValueError, match="last dimension must be K = 16"):
        SK.splitk_linear(torch.randn(3, 15, device=RT.device), w)


def test_swapped_into_the_model_the_tokens_do_not_change():
    from tritonllm_course.swap import compare_greedy
    report = compare_greedy({"linear": SK.splitk_linear}, n_new=3, verbose=False)
    assert report.passed, str(report)


def test_bench_plumbing_runs_on_the_cpu(monkeypatch, tmp_path):
    """The GPU measurements' code paths (inputs, variants, sweep, spread, plots) with a stand-in timer."""
    import matplotlib
    matplotlib.use("Agg")
    from tritonllm_course.measure import splitk_bench as B
    monkeypatch.setattr(B, "DEVICE", RT.device)
    monkeypatch.setattr(B, "time_calls", lambda fn, sets: (fn(**sets[0]), 1.0)[1])
    linear = kernels.load("linear", "solutions").module
    compared = B.compare(37, 1000, SK, linear, dtype=torch.float32)
    assert set(compared["us"]) == {*B.PEERS, "split-K two-stage", "split-K atomic", "atomic kernel alone"}
    swept = B.sweep(37, 1000, SK, linear, dtype=torch.float32, splits=(1, 2, 2, 4), peers_us=compared["us"])
    assert [p["split"] for p in swept["points"]] == [1, 2, 4]          # each number of pieces once
    assert all(r["identical"] for r in B.spread(37, 1000, SK, runs=2).values())
    B.plot_sweep(swept).figure.savefig(tmp_path / "sweep.png")
    B.plot_compare([compared], 4000.0).figure.savefig(tmp_path / "compare.png")


# --- GPU ---------------------------------------------------------------------------------------------
REAL_NARROW = [(1024, 2048), (1024, 3584)]


@pytest.mark.gpu
@pytest.mark.parametrize("N,K", REAL_NARROW)
def test_two_stage_is_bit_identical_on_the_gpu_and_the_atomic_spread_is_reported(N, K):
    """Asserts the two-stage variant's bits; reports (as a warning in the log) how the atomic one varies."""
    from tritonllm_course.measure.splitk_bench import spread
    report = spread(N, K, SK, runs=50)
    for dtype in ("bfloat16", "float32"):
        assert report[f"two-stage {dtype}"]["identical"], report
    warnings.warn(f"split-K atomic run-to-run spread at {N} x {K}, 50 runs: "
                  f"bf16 {report['atomic bfloat16']}, fp32 {report['atomic float32']}")


@pytest.mark.gpu
@pytest.mark.timing
@pytest.mark.parametrize("index", [0, 1])
def test_splitk_beats_cublas_at_the_narrow_shapes(index):
    """cuBLAS (`F.linear`) is slower than the split-K GEMV at both narrow shapes on an H200: too few blocks
    (results/splitk_nvidia-h200_2026-11-30.json, `compare`)."""
    from tritonllm_course.measure.benchmark import bench
    from tritonllm_course.slots import get
    result = bench("splitk_gemv", "solutions", shape=get("splitk_gemv").shape(RT.preset, index),
                   compile=False, verbose=False)
    assert result.times_us["triton"] <= result.times_us["torch eager"], str(result)
